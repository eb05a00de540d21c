"""Writing the answers of a batch (delivery.sql: record_attempts) when a try's
commit was not heard.

The recorder writes a batch in one statement. When the connection drops as the
server answers, the worker cannot know whether that statement committed, so it
writes the same batch again. That second write must change nothing and say
which rows were held, as the first did: an error there kept the batch, and
every slot its rows held, retrying until their leases ran out (minutes), while
the rest of the queue waited. docs/architecture.md, "Delivery: claim, send, record".
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from receipts.delivery.claims import ClaimedRow, claim_ready, record_attempts
from receipts.delivery.decisions import AttemptResult
from receipts.vocabulary import AttemptOutcome, RowStatus
from tests.outbox_states import insert_pending

Row = dict[str, Any]
Db = psycopg.Connection[Row]

SENT = AttemptResult(
    status=RowStatus.SENT, outcome=AttemptOutcome.SENT, http_status=200, provider_id="em_1"
)
RETRY = AttemptResult(
    status=RowStatus.PENDING, outcome=AttemptOutcome.RETRY, http_status=503, retry_in_seconds=30
)


def claim(database_url: str, limit: int) -> list[ClaimedRow]:
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        return claim_ready(
            conn, limit=limit, worker_id="w-record", lease_seconds=60, max_attempts=10,
            retry_cutoff_hours=23, render=lambda key, given: given,
        ).rows  # fmt: skip


def write(database_url: str, batch: list[tuple[ClaimedRow, AttemptResult]]) -> list[bool]:
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        return record_attempts(conn, batch)


def snapshot(db: Db) -> list[Row]:
    return db.execute(
        """SELECT o.message_key, o.status, o.provider_id, o.attempts, o.updated_at,
                  a.outcome, a.finished_at
             FROM email_outbox AS o JOIN email_attempts AS a USING (message_key)
            ORDER BY o.message_key, a.id"""
    ).fetchall()


def test_a_batch_written_again_changes_nothing_and_says_held_as_before(
    db: Db, database_url: str
) -> None:
    insert_pending(db, 2, prefix="in_1Twice")
    first, second = claim(database_url, 2)
    batch = [(first, SENT), (second, RETRY)]
    assert write(database_url, batch) == [True, True]
    written = snapshot(db)
    assert [(r["status"], r["outcome"]) for r in written] == [
        ("sent", "sent"),
        ("pending", "retry"),
    ]

    assert write(database_url, batch) == [True, True]
    assert snapshot(db) == written


def test_a_lost_lease_written_again_is_still_lost_and_the_new_holder_keeps_the_row(
    db: Db, database_url: str
) -> None:
    [key] = insert_pending(db, 1, prefix="in_1TwiceLost")
    [stale] = claim(database_url, 1)
    db.execute(
        "UPDATE email_outbox SET locked_until = now() - interval '1 second' WHERE message_key = %s",
        (key,),
    )
    [current] = claim(database_url, 1)
    assert write(database_url, [(stale, SENT)]) == [False]
    assert write(database_url, [(stale, SENT)]) == [False]
    assert write(database_url, [(current, RETRY)]) == [True]
    outcomes = [r["outcome"] for r in snapshot(db)]
    assert outcomes == ["lease_lost", "retry"]
    assert db.execute("SELECT status FROM email_outbox").fetchone() == {"status": "pending"}


def test_a_batch_with_one_answer_already_written_writes_the_others(
    db: Db, database_url: str
) -> None:
    """A batch the recorder gathered again around an answer an earlier try stored:
    the stored one is left as it is, the others are written."""
    insert_pending(db, 2, prefix="in_1TwiceMixed")
    first, second = claim(database_url, 2)
    assert write(database_url, [(first, SENT)]) == [True]
    assert write(database_url, [(first, SENT), (second, SENT)]) == [True, True]
    assert [(r["status"], r["outcome"]) for r in snapshot(db)] == [("sent", "sent")] * 2
