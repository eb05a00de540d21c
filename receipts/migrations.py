"""Apply the numbered ``sql/NNN_name.sql`` files, each once, in order.

Every run takes a transaction-level advisory lock first, so two release
processes started together apply each file exactly once; the second waits and
then finds nothing left to do. The bookkeeping statements (the lock, the
``schema_migrations`` table) are in ``receipts/queries/migrations.sql``; the
migrations themselves are the files of ``sql/``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from receipts import queries
from receipts.db import connect

log = logging.getLogger(__name__)

# An arbitrary constant shared by every receipts process: "receipts" in ASCII.
MIGRATION_LOCK_ID = 0x7265636569707473

_MIGRATIONS = queries.load("migrations")
_FILE_NAME = re.compile(r"(\d{3})_[a-z0-9_]+\.sql")


@dataclass(frozen=True, kw_only=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations_dir() -> Path:
    """The installed copy (wheel), or the repository's ``sql/`` (editable install)."""
    installed = Path(str(resources.files("receipts"))) / "sql"
    if installed.is_dir():
        return installed
    return Path(__file__).resolve().parent.parent / "sql"


def load_migrations(directory: Path | None = None) -> list[Migration]:
    directory = directory or migrations_dir()
    found = []
    for path in sorted(directory.glob("*.sql")):
        match = _FILE_NAME.fullmatch(path.name)
        if match is None:
            continue
        found.append(
            Migration(version=int(match.group(1)), name=path.stem, sql=path.read_text("utf-8"))
        )
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"two migrations share a number in {directory}")
    return found


def migrate(database_url: str) -> list[str]:
    """Apply pending migrations; return the names applied (empty when up to date)."""
    applied_now: list[str] = []
    with connect(database_url) as conn, conn.transaction():
        conn.execute(_MIGRATIONS["take_migration_lock"], {"lock_id": MIGRATION_LOCK_ID})
        conn.execute(_MIGRATIONS["create_schema_migrations"])
        done = {row["version"] for row in conn.execute(_MIGRATIONS["applied_migration_versions"])}
        for migration in load_migrations():
            if migration.version in done:
                continue
            log.info("applying migration %s", migration.name)
            conn.execute(migration.sql.encode("utf-8"))
            conn.execute(
                _MIGRATIONS["record_applied_migration"],
                {"version": migration.version, "name": migration.name},
            )
            applied_now.append(migration.name)
    return applied_now
