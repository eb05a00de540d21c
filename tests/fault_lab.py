"""What the fault lab's cases share: the wire messages the proxy watches for, the
outbox read back, leases aged, and a proxy action that kills a worker."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from typing import Any

import psycopg

from receipts import queries
from tests.fake_provider import FakeProviderClient
from tests.tcp_proxy import Verdict

Row = dict[str, Any]
Db = psycopg.Connection[Row]

# The claim is one autocommit statement: the first ReadyForQuery ("idle") after
# it means the server has committed the lease and waits for the worker.
READY_IDLE = b"Z\x00\x00\x00\x05I"


def named(statement: str) -> bytes:
    """The name line a statement of receipts/queries/delivery.sql carries over
    the wire, as the proxy sees it; a name the file lacks fails here, not as a
    pattern that silently never matches."""
    text = queries.load("delivery")[statement]
    first_line = text.splitlines()[0]
    assert first_line == f"-- name: {statement}"
    return f"{first_line}\n".encode()


CLAIM_SQL = named("claim_ready")  # leases the rows, committed on its own
RECORD_SQL = named("record_attempts")  # writes the provider's answers
LISTEN_SQL = named("listen")


def statuses(db: Db) -> dict[str, int]:
    rows = db.execute("SELECT status, count(*) AS n FROM email_outbox GROUP BY 1").fetchall()
    return {row["status"]: row["n"] for row in rows}


def attempt_log(db: Db, key: str) -> list[Row]:
    return db.execute(
        """SELECT attempt, outcome, http_status, finished_at IS NULL AS unfinished
             FROM email_attempts WHERE message_key = %s ORDER BY id""",
        (key,),
    ).fetchall()


def age_leases(db: Db) -> int:
    """Make every lease look expired, as if its worker had died long ago."""
    return db.execute(
        """UPDATE email_outbox SET locked_until = now() - interval '1 second'
            WHERE status = 'processing'"""
    ).rowcount


def assert_nothing_lost_nothing_doubled(
    db: Db, provider: FakeProviderClient, keys: list[str], deliveries_per_key: int = 1
) -> None:
    """Every receipt is sent with the id of its delivery (or in review with a
    reason); the provider delivered each key exactly ``deliveries_per_key`` times."""
    rows = db.execute(
        """SELECT message_key, status, review_reason, provider_id, sent_at, lease_token
             FROM email_outbox ORDER BY message_key"""
    ).fetchall()
    assert [row["message_key"] for row in rows] == sorted(keys)
    delivered: dict[str, list[str]] = {}
    for delivery in provider.deliveries():
        delivered.setdefault(delivery["key"], []).append(delivery["id"])
    for row in rows:
        if row["status"] == "review":
            assert row["review_reason"], row
            continue
        assert row["status"] == "sent", row
        assert row["sent_at"] is not None and row["lease_token"] is None, row
        assert row["provider_id"] in delivered[row["message_key"]], row
    assert provider.stats()["deliveries_by_key"] == dict.fromkeys(keys, deliveries_per_key)


def kill(process: subprocess.Popen[str]) -> Callable[[], Verdict]:
    """A proxy action: SIGKILL the worker and reset its database connection."""

    def action() -> Verdict:
        os.kill(process.pid, signal.SIGKILL)
        return "cut"

    return action
