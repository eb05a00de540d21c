"""Ingest's single statement against a delivery committed under its feet.

The one-statement ingest classifies an existing row from its snapshot. When
another delivery's row is still uncommitted as the statement starts, the
statement waits on it, and after that delivery commits cannot see the row it
conflicted with. These tests stage exactly that with two real connections and
check the delivery is still classified correctly, and stored once.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from receipts.db import Database
from receipts.ingest.store import IngestResult, ingest
from receipts.receipt.derivation import Decision, derive_receipt
from receipts.receipt.event import EventHeader, parse_event
from tests import stripe_events
from tests.helpers import wait_for
from tests.sessions import waiting_on_a_lock

Row = dict[str, Any]


def decided(event: dict[str, Any]) -> tuple[EventHeader, Decision]:
    header = parse_event(event)
    return header, derive_receipt(header, email_from="billing@example.com")


@pytest.mark.parametrize(("second_amount", "expected"), [(1999, "duplicate"), (2500, "conflict")])
def test_delivery_racing_an_uncommitted_row_is_classified_after_it_commits(
    database_url: str, db: psycopg.Connection[Row], second_amount: int, expected: str
) -> None:
    """Two events about one invoice: the first holds its new row uncommitted
    while the second's statement starts and waits; once the first commits,
    the second is recorded as a duplicate (same meaning) or a conflict
    (different amount), and there is one outbox row."""
    first_header, first = decided(
        stripe_events.event(stripe_events.invoice(id="in_1Race", amount_paid=1999))
    )
    second_header, second = decided(
        stripe_events.event(stripe_events.invoice(id="in_1Race", amount_paid=second_amount))
    )
    database = Database(database_url)
    results: list[IngestResult] = []
    with psycopg.connect(database_url, row_factory=dict_row) as holder:
        with holder.transaction():
            assert ingest(holder, first_header, first).outcome == "queued"

            def deliver_second() -> None:
                with database.autocommit() as conn:
                    results.append(ingest(conn, second_header, second))

            racer = threading.Thread(target=deliver_second)
            racer.start()
            wait_for(lambda: waiting_on_a_lock(db), 10, "the second delivery to wait")
        racer.join(timeout=10)
    database.close()

    [result] = results
    assert result.outcome == expected and not result.redelivery
    assert db.execute("SELECT count(*) AS n FROM email_outbox").fetchone() == {"n": 1}
    outcomes = db.execute(
        "SELECT event_id, outcome FROM stripe_events ORDER BY first_received_at"
    ).fetchall()
    assert outcomes == [
        {"event_id": first_header.event_id, "outcome": "queued"},
        {"event_id": second_header.event_id, "outcome": expected},
    ]


def test_redelivery_through_the_single_statement_counts_and_keeps_the_first_outcome(
    database_url: str, db: psycopg.Connection[Row]
) -> None:
    """The same event three times on autocommit connections: one row, one
    event with three deliveries, the later two flagged as redeliveries."""
    header, decision = decided(stripe_events.event())
    database = Database(database_url)
    try:
        seen = []
        for _ in range(3):
            with database.autocommit() as conn:
                seen.append(ingest(conn, header, decision))
    finally:
        database.close()
    assert [(r.outcome, r.redelivery) for r in seen] == [
        ("queued", False),
        ("queued", True),
        ("queued", True),
    ]
    assert db.execute("SELECT deliveries FROM stripe_events").fetchall() == [{"deliveries": 3}]
