"""A real PgBouncer in transaction pooling mode in front of the test server.

Debian's ``pgbouncer`` package (``.ci/run`` installs it when missing). It runs
from a temporary configuration on a free port of 127.0.0.1, as an unprivileged
user when the tests run as root (PgBouncer refuses to run as root), and
forwards every database name to the test server with ``auth_type = trust``,
which the test server also uses for 127.0.0.1.

In transaction mode each transaction of a client connection may run on a
different server connection: a statement prepared in one is unknown in the
next, and LISTEN is forgotten when its transaction ends. That is what the
product must cope with behind most managed PostgreSQL offerings.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from tests.helpers import free_port

# PgBouncer drops root privileges to no one by itself: run it as this user when we are root.
UNPRIVILEGED_USER = "nobody"


def binary() -> str | None:
    """The pgbouncer executable, or None when it is not installed."""
    return shutil.which("pgbouncer") or next(
        (path for path in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if Path(path).exists()),
        None,
    )


def version(executable: str) -> tuple[int, ...]:
    output = subprocess.run(
        [executable, "--version"], capture_output=True, text=True, check=False, timeout=10
    ).stdout
    found = re.search(r"PgBouncer (\d+)\.(\d+)", output)
    return tuple(int(part) for part in found.groups()) if found else (0, 0)


@dataclass(frozen=True)
class PgBouncer:
    """A running PgBouncer: URLs through it, and its log."""

    port: int
    log: Path

    def url_for(self, direct_url: str) -> str:
        """The same database, user and options, through PgBouncer."""
        parts = urlsplit(direct_url)
        user = parts.netloc.rsplit("@", 1)[0] if "@" in parts.netloc else "postgres"
        return urlunsplit(parts._replace(netloc=f"{user}@127.0.0.1:{self.port}"))


def _config(directory: Path, server_url: str, port: int, executable: str) -> Path:
    server = urlsplit(server_url)
    user = server.username or "postgres"
    (directory / "userlist.txt").write_text(f'"{user}" ""\n')
    lines = [
        "[databases]",
        f"* = host={server.hostname or '127.0.0.1'} port={server.port or 5432}",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        f"listen_port = {port}",
        "unix_socket_dir =",
        "auth_type = trust",
        f"auth_file = {directory / 'userlist.txt'}",
        "pool_mode = transaction",
        "max_client_conn = 1000",
        "default_pool_size = 20",
        "ignore_startup_parameters = extra_float_digits",
    ]
    if version(executable) >= (1, 21):
        # Newer versions can track protocol-level prepared statements; the
        # product must not depend on it, so the tests run without.
        lines.append("max_prepared_statements = 0")
    path = directory / "pgbouncer.ini"
    path.write_text("\n".join(lines) + "\n")
    for made in (directory, path, directory / "userlist.txt"):
        made.chmod(0o755 if made.is_dir() else 0o644)
    return path


@contextmanager
def running_pgbouncer(server_url: str, temp_dir: Path) -> Iterator[PgBouncer]:
    """Start PgBouncer in front of ``server_url``, its files in a new folder under
    ``temp_dir`` (which its own system user must be able to reach); stop it on exit."""
    executable = binary()
    if executable is None:
        raise FileNotFoundError("pgbouncer is not installed")
    directory = Path(tempfile.mkdtemp(prefix="receipts-pgbouncer-", dir=temp_dir))
    port = free_port()
    config = _config(directory, server_url, port, executable)
    log = directory / "pgbouncer.log"
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    with log.open("wb") as output:
        process = subprocess.Popen(
            [executable, str(config)],
            stdout=output,
            stderr=subprocess.STDOUT,
            user=UNPRIVILEGED_USER if as_root else None,
        )
    bouncer = PgBouncer(port=port, log=log)
    try:
        _wait_until_it_answers(bouncer, server_url, process)
        yield bouncer
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(directory, ignore_errors=True)


def _wait_until_it_answers(
    bouncer: PgBouncer, server_url: str, process: subprocess.Popen[bytes]
) -> None:
    url = bouncer.url_for(server_url)
    deadline = time.monotonic() + 20
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"pgbouncer exited: {bouncer.log.read_text(errors='replace')}")
        try:
            with psycopg.connect(url, connect_timeout=2, prepare_threshold=None) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
