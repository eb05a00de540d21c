"""One consistent, read-only view of the database for a report.

``receipts status`` and ``receipts show`` read several tables; in one
repeatable-read transaction every read sees the same moment, so the counts
and timelines they print agree with each other. The statements are in
``receipts/queries/reports.sql``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from receipts import queries
from receipts.db import Connection, connect

_REPORTS = queries.load("reports")


@contextmanager
def read_only_snapshot(database_url: str) -> Iterator[Connection]:
    """One consistent, read-only view of every table, for a report."""
    with connect(database_url) as conn, conn.transaction():
        conn.execute(_REPORTS["read_only_snapshot"])
        conn.execute(_REPORTS["no_jit"])
        yield conn
