"""What the sessions of a test's database are doing, as ``pg_stat_activity`` says.

Tests that stage a race wait for a session to be in the state the race needs
(waiting on a lock), rather than for a while.
"""

from __future__ import annotations

from typing import Any

import psycopg


def waiting_on_a_lock(db: psycopg.Connection[dict[str, Any]]) -> bool:
    """Some session of ``db``'s database waits for a lock another one holds."""
    row = db.execute(
        """SELECT count(*) AS n FROM pg_stat_activity
            WHERE datname = current_database() AND wait_event_type = 'Lock'"""
    ).fetchone()
    return bool(row and row["n"])
