"""The database side of the outbox: every SQL statement ingest runs.

Ingest is one transaction per delivery. The outbox row is inserted with
``ON CONFLICT (message_key) DO NOTHING`` so concurrent deliveries, redeliveries
and different events about the same invoice all collapse onto one row; the
event row counts deliveries and records what each event meant.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg.types.json import Jsonb

from receipts.db import Connection
from receipts.receipt import (
    PURPOSE,
    Decision,
    EventHeader,
    Ignored,
    ReceiptJob,
    UnsendableReceipt,
)

NOTIFY_CHANNEL = "receipts_outbox"


@dataclass(frozen=True, kw_only=True)
class IngestResult:
    """What one delivery did: its outcome, and whether it was a redelivery."""

    event_id: str
    outcome: str  # queued | review | duplicate | conflict | ignored
    message_key: str | None
    redelivery: bool
    detail: str | None = None


def ingest(conn: Connection, header: EventHeader, decision: Decision) -> IngestResult:
    """Record one verified delivery and, for a paid invoice, its outbox row."""
    if isinstance(decision, Ignored):
        return _record_event(conn, header, "ignored", None, None, decision.reason)
    outcome = _insert_outbox_row(conn, header, decision)
    detail = decision.reason if isinstance(decision, UnsendableReceipt) else None
    return _record_event(conn, header, outcome, decision.message_key, decision.fingerprint, detail)


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
        if is_job:
            conn.execute("SELECT pg_notify(%s, '')", (NOTIFY_CHANNEL,))
            return "queued"
        return "review"
    existing = conn.execute(
        "SELECT fingerprint FROM email_outbox WHERE message_key = %s", (decision.message_key,)
    ).fetchone()
    # A receipt imported from an earlier sender (`receipts import`) was sent
    # already: any event for it is a duplicate, not a conflict.
    if existing is not None and (
        existing["fingerprint"] == decision.fingerprint
        or existing["fingerprint"].startswith("imported:")
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
    return IngestResult(
        event_id=header.event_id,
        outcome=row["outcome"],
        message_key=row["message_key"],
        redelivery=not row["first_delivery"],
        detail=row["detail"],
    )
