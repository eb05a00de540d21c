"""The database side of ingest: record one verified delivery and its outbox row.

Ingest is one transaction per delivery. The outbox row is inserted with
``ON CONFLICT (message_key) DO NOTHING`` so concurrent deliveries, redeliveries
and different events about the same invoice all collapse onto one row; the
event row counts deliveries and records what each event meant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from receipts.db import Connection
from receipts.ingest.events import EventHeader
from receipts.ingest.receipt import Decision, Ignored, ReceiptJob, UnsendableReceipt
from receipts.vocabulary import IMPORTED_FINGERPRINT_PREFIX, PURPOSE


@dataclass(frozen=True, kw_only=True)
class IngestResult:
    """What one delivery did: its outcome, and whether it was a redelivery."""

    event_id: str
    outcome: str  # queued | review | duplicate | conflict | ignored
    message_key: str | None
    redelivery: bool
    detail: str | None = None


def ingest(conn: Connection, header: EventHeader, decision: Decision) -> IngestResult:
    """Record one verified delivery and, for a paid invoice, its outbox row.

    One statement does it all on every common path (a new row, a redelivery,
    a duplicate or conflict of a committed row), so on an autocommit
    connection a delivery costs one round trip and is atomic. Only when the
    row was committed by a concurrent delivery after that statement's snapshot
    was taken can it not tell duplicate from conflict; it then stores nothing
    and the delivery is recorded by separate statements in one transaction,
    which do see that row.
    """
    if isinstance(decision, Ignored):
        return _record_event(conn, header, "ignored", None, None, decision.reason)
    detail = decision.reason if isinstance(decision, UnsendableReceipt) else None
    result = _ingest_in_one_statement(conn, header, decision, detail)
    if result is not None:
        return result
    with conn.transaction():
        outcome = _insert_outbox_row(conn, header, decision)
        return _record_event(
            conn, header, outcome, decision.message_key, decision.fingerprint, detail
        )


_INGEST_ONE_STATEMENT = """
WITH new_row AS (
    INSERT INTO email_outbox (message_key, purpose, account, livemode, invoice_id,
                              source_event_id, fingerprint, payload, status, review_reason)
    VALUES (%(key)s, %(purpose)s, %(account)s, %(livemode)s, %(invoice_id)s, %(event_id)s,
            %(fingerprint)s, %(payload)s, %(status)s, %(review_reason)s)
    ON CONFLICT (message_key) DO NOTHING
    RETURNING 1
), existing AS (
    SELECT fingerprint FROM email_outbox
     WHERE message_key = %(key)s AND NOT EXISTS (SELECT FROM new_row)
), decided AS (
    SELECT CASE WHEN EXISTS (SELECT FROM new_row) THEN %(new_outcome)s::text
                WHEN (SELECT fingerprint FROM existing) = %(fingerprint)s THEN 'duplicate'
                -- imported from an earlier sender (`receipts import`): sent already
                WHEN starts_with((SELECT fingerprint FROM existing), %(imported_prefix)s)
                    THEN 'duplicate'
                WHEN EXISTS (SELECT FROM existing) THEN 'conflict'
           END AS outcome
)
INSERT INTO stripe_events (event_id, event_type, account, livemode, outcome, detail,
                           message_key, fingerprint)
SELECT %(event_id)s, %(event_type)s, %(account)s, %(livemode)s, outcome, %(detail)s,
       %(key)s, %(fingerprint)s
  FROM decided
 WHERE outcome IS NOT NULL
ON CONFLICT (event_id) DO UPDATE
   SET deliveries = stripe_events.deliveries + 1,
       last_received_at = now()
RETURNING outcome, detail, message_key, (xmax = 0) AS first_delivery
"""


def _ingest_in_one_statement(
    conn: Connection,
    header: EventHeader,
    decision: ReceiptJob | UnsendableReceipt,
    detail: str | None,
) -> IngestResult | None:
    """Insert row and event in one statement; None if the row's outcome is not yet visible."""
    is_job = isinstance(decision, ReceiptJob)
    row = conn.execute(
        _INGEST_ONE_STATEMENT,
        {
            "key": decision.message_key,
            "purpose": PURPOSE,
            "account": header.account,
            "livemode": header.livemode,
            "invoice_id": decision.invoice_id,
            "event_id": header.event_id,
            "event_type": header.event_type,
            "fingerprint": decision.fingerprint,
            "payload": Jsonb(decision.payload) if isinstance(decision, ReceiptJob) else None,
            "status": "pending" if is_job else "review",
            "review_reason": None if isinstance(decision, ReceiptJob) else decision.reason,
            "new_outcome": "queued" if is_job else "review",
            "imported_prefix": IMPORTED_FINGERPRINT_PREFIX,
            "detail": detail,
        },
    ).fetchone()
    if row is None:
        return None
    return _result(header, row)


def _insert_outbox_row(
    conn: Connection, header: EventHeader, decision: ReceiptJob | UnsendableReceipt
) -> str:
    """Insert the row, or classify the existing one as duplicate or conflict."""
    is_job = isinstance(decision, ReceiptJob)
    inserted = conn.execute(
        """INSERT INTO email_outbox
               (message_key, purpose, account, livemode, invoice_id, source_event_id,
                fingerprint, payload, status, review_reason)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
           ON CONFLICT (message_key) DO NOTHING
           RETURNING status""",
        (
            decision.message_key,
            PURPOSE,
            header.account,
            header.livemode,
            decision.invoice_id,
            header.event_id,
            decision.fingerprint,
            Jsonb(decision.payload) if isinstance(decision, ReceiptJob) else None,
            "pending" if is_job else "review",
            None if isinstance(decision, ReceiptJob) else decision.reason,
        ),
    ).fetchone()
    if inserted is not None:
        # No NOTIFY here: it would serialize every commit (see receipts.ingest.wakeup);
        # the caller wakes the workers after the commit.
        return "queued" if is_job else "review"
    existing = conn.execute(
        "SELECT fingerprint FROM email_outbox WHERE message_key = %s", (decision.message_key,)
    ).fetchone()
    # A receipt imported from an earlier sender (`receipts import`) was sent
    # already: any event for it is a duplicate, not a conflict.
    if existing is not None and (
        existing["fingerprint"] == decision.fingerprint
        or existing["fingerprint"].startswith(IMPORTED_FINGERPRINT_PREFIX)
    ):
        return "duplicate"
    return "conflict"


def _record_event(
    conn: Connection,
    header: EventHeader,
    outcome: str,
    key: str | None,
    fingerprint: str | None,
    detail: str | None,
) -> IngestResult:
    """Insert the event, or count one more delivery of it and keep its first outcome."""
    row = conn.execute(
        """INSERT INTO stripe_events
               (event_id, event_type, account, livemode, outcome, detail, message_key, fingerprint)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
           ON CONFLICT (event_id) DO UPDATE
               SET deliveries = stripe_events.deliveries + 1,
                   last_received_at = now()
           RETURNING outcome, detail, message_key, (xmax = 0) AS first_delivery""",
        (
            header.event_id,
            header.event_type,
            header.account,
            header.livemode,
            outcome,
            detail,
            key,
            fingerprint,
        ),
    ).fetchone()
    assert row is not None
    return _result(header, row)


def _result(header: EventHeader, event_row: dict[str, Any]) -> IngestResult:
    """The event row as stored: its first outcome, and whether this was a redelivery."""
    return IngestResult(
        event_id=header.event_id,
        outcome=event_row["outcome"],
        message_key=event_row["message_key"],
        redelivery=not event_row["first_delivery"],
        detail=event_row["detail"],
    )
