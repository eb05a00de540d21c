"""Local development state: the dev folder, its webhook secret, its database.

``receipts dev`` and ``receipts replay`` run in two terminals and must agree on
a webhook secret without the developer configuring one. The secret lives in
the dev state folder (``.receipts/`` in the working directory, or
``RECEIPTS_DEV_DIR``); the embedded database for that folder lives under the
system temp directory (see :func:`receipts.dev.embedded.default_data_dir` for why
not in the folder itself).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from receipts.config import Settings
from receipts.dev.embedded import default_data_dir

DEFAULT_STATE_DIR = Path(".receipts")
SECRET_FILE = "stripe-webhook-secret"
DATABASE_ID_FILE = "database-id"
DEV_EMAIL_FROM = '"Receipts (dev)" <receipts-dev@example.com>'
DEV_WEBHOOK_URL = "http://127.0.0.1:8000/webhooks/stripe"


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
