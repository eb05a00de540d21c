"""Local development state: the dev folder, its webhook secret, its database.

``receipts dev`` and ``receipts replay`` run in two terminals and must agree on
a webhook secret without the developer configuring one. The secret lives in
the dev state folder (``.receipts/`` in the working directory, or
``RECEIPTS_DEV_DIR``); the embedded database for that folder lives under the
system temp directory (see :func:`receipts.dev.embedded.default_data_dir` for why
not in the folder itself).

While it runs, ``receipts dev`` also records itself in the folder
(``dev.json``: its pid, database URL and webhook URL), and names that folder
in a file of this user's under the temp directory (``TMPDIR`` of the
command's environment, else the system's). Other commands find the running dev
server there (:func:`find_running`): ``replay`` posts to its port, and a
command that needs a database uses its database when ``DATABASE_URL`` is
unset, saying so on stderr. From another folder the most recently started
dev server is the one found.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from receipts.config import ConfigError, Settings
from receipts.dev.embedded import default_data_dir

DEFAULT_STATE_DIR = Path(".receipts")
SECRET_FILE = "stripe-webhook-secret"
DATABASE_ID_FILE = "database-id"
DEV_EMAIL_FROM = '"Receipts (dev)" <receipts-dev@example.com>'
DEV_WEBHOOK_URL = "http://127.0.0.1:8000/webhooks/stripe"
RUNNING_FILE = "dev.json"


def state_dir(settings: Settings, override: Path | None = None) -> Path:
    """The dev state folder: ``--state-dir``, else RECEIPTS_DEV_DIR, else ``.receipts``."""
    return (override or settings.dev_dir or DEFAULT_STATE_DIR).resolve()


def read_dev_secret(folder: Path) -> str | None:
    """The secret ``receipts dev`` generated for this folder, if it has run there."""
    try:
        secret = (folder / SECRET_FILE).read_text().strip()
    except FileNotFoundError:
        return None
    return secret or None


def ensure_dev_secret(folder: Path) -> tuple[str, bool]:
    """The folder's dev secret, created on first use; True when it was just created."""
    existing = read_dev_secret(folder)
    if existing is not None:
        return existing, False
    folder.mkdir(parents=True, exist_ok=True)
    secret = "whsec_dev_" + secrets.token_hex(24)
    descriptor = os.open(folder / SECRET_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(secret + "\n")
    return secret, True


def dev_data_dir(folder: Path) -> Path:
    """The embedded database's data directory for one dev state folder.

    Named by an id kept in the folder, so deleting the folder starts a fresh
    database too, as a developer resetting their setup expects.
    """
    id_file = folder / DATABASE_ID_FILE
    try:
        database_id = id_file.read_text().strip()
    except FileNotFoundError:
        database_id = ""
    if not database_id:
        folder.mkdir(parents=True, exist_ok=True)
        database_id = secrets.token_hex(6)
        id_file.write_text(database_id + "\n")
    return default_data_dir(f"dev-{database_id}")


@dataclass(frozen=True, kw_only=True)
class RunningDev:
    """A ``receipts dev`` that is running: where its state is and how to reach it."""

    folder: Path
    pid: int
    database_url: str
    webhook_url: str
    # What dev chose for settings left unset (EMAIL_FROM, RECEIPTS_MAIL_DIR).
    defaults: dict[str, str]


def _pointer(environ: Mapping[str, str]) -> Path:
    """This user's note of the most recently started dev server's folder.

    Under ``TMPDIR`` of the environment the command was given (a process
    started with another temp directory neither finds nor replaces it), else
    under the system's temp directory.
    """
    uid = os.getuid() if hasattr(os, "getuid") else 0
    folder = environ.get("TMPDIR") or tempfile.gettempdir()
    return Path(folder) / f"receipts-dev-{uid}.json"


def _write_private(path: Path, document: dict[str, object]) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump(document, file)


def record_running(
    folder: Path,
    *,
    database_url: str,
    webhook_url: str,
    defaults: Mapping[str, str],
    environ: Mapping[str, str],
) -> None:
    """Say, until :func:`forget_running`, that this process serves this folder."""
    document = {
        "pid": os.getpid(),
        "database_url": database_url,
        "webhook_url": webhook_url,
        "defaults": dict(defaults),
    }
    _write_private(folder / RUNNING_FILE, document)
    # Without the pointer, other folders do not find this dev server; its own still does.
    with contextlib.suppress(OSError):
        _write_private(_pointer(environ), {"folder": str(folder), "pid": os.getpid()})


def running_in(folder: Path) -> int | None:
    """The pid of a live dev server that serves ``folder``, if one does."""
    try:
        pid = int(json.loads((folder / RUNNING_FILE).read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pid if pid != os.getpid() and _alive(pid) else None


def forget_running(folder: Path, environ: Mapping[str, str]) -> None:
    for path in (folder / RUNNING_FILE, _pointer(environ)):
        try:
            if json.loads(path.read_text()).get("pid") == os.getpid():
                path.unlink()
        except (OSError, ValueError, AttributeError):
            pass


def find_running(environ: Mapping[str, str], override: Path | None = None) -> RunningDev | None:
    """The dev server of ``--state-dir``, RECEIPTS_DEV_DIR or ./.receipts, if it runs;
    with none of those folders present, the one most recently started by this user."""
    named = override or (
        Path(environ["RECEIPTS_DEV_DIR"]) if environ.get("RECEIPTS_DEV_DIR") else None
    )
    folder = (named or DEFAULT_STATE_DIR).resolve()
    if named is None and not folder.is_dir():
        try:
            folder = Path(json.loads(_pointer(environ).read_text())["folder"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
    try:
        recorded = json.loads((folder / RUNNING_FILE).read_text())
        running = RunningDev(
            folder=folder,
            pid=int(recorded["pid"]),
            database_url=str(recorded["database_url"]),
            webhook_url=str(recorded["webhook_url"]),
            defaults={str(k): str(v) for k, v in dict(recorded.get("defaults") or {}).items()},
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return running if _alive(running.pid) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def with_dev_database(
    environ: Mapping[str, str], *, dev_settings: bool = False
) -> Mapping[str, str]:
    """``environ``, with the running dev server's database when DATABASE_URL is unset.

    Says so on stderr. A dev state folder whose server is not running is an
    error naming DATABASE_URL, rather than a connection to nothing. With
    ``dev_settings`` (``receipts doctor``), also what dev uses for settings left
    unset: its sender, its mail folder and its webhook secret.
    """
    if environ.get("DATABASE_URL", "").strip():
        return environ
    running = find_running(environ)
    if running is None:
        folder = Path(environ.get("RECEIPTS_DEV_DIR") or DEFAULT_STATE_DIR)
        if folder.is_dir() and (folder / DATABASE_ID_FILE).exists():
            raise ConfigError(
                "DATABASE_URL",
                f"is not set, and the `receipts dev` of {folder} is not running: "
                "start it, or set DATABASE_URL",
            )
        return environ
    print(
        f"receipts: DATABASE_URL is not set; using the database of `receipts dev` "
        f"(pid {running.pid}, {running.folder / RUNNING_FILE})",
        file=sys.stderr,
    )
    found = {**environ, "DATABASE_URL": running.database_url}
    if dev_settings:
        for name, value in running.defaults.items():
            found.setdefault(name, value)
        secret = read_dev_secret(running.folder)
        if secret and not environ.get("STRIPE_WEBHOOK_SECRET", "").strip():
            found["STRIPE_WEBHOOK_SECRET"] = secret
    return found
