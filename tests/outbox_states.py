"""Put the outbox in a given state with plain SQL, as the worker would leave it.

Operator tests need rows mid-retry, abandoned attempts, review rows and sent
rows, and worker tests need pending rows in bulk; inserting them directly keeps
each kind of test independent of the others' code.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from receipts.message_keys import message_key, provider_tag

Db = psycopg.Connection[dict[str, Any]]

INVOICE_URL = "https://invoice.stripe.com/i/acct_1Test/test_secret_link?s=ap"
BODY_TEXT = f"Thank you for your payment. View it at {INVOICE_URL}"


def payload(key: str, to: str = "jenny.rosen@example.com") -> dict[str, Any]:
    return {
        "from": "Billing <billing@example.com>",
        "to": [to],
        "subject": "Receipt for invoice ABC-0001",
        "text": BODY_TEXT,
        "html": f"<p>{BODY_TEXT}</p>",
        "tags": [{"name": "message_key", "value": provider_tag(key)}],
    }


def insert_row(
    db: Db,
    invoice_id: str = "in_1Ops",
    *,
    status: str = "pending",
    review_reason: str | None = None,
    account: str = "platform",
    livemode: bool = False,
    with_payload: bool = True,
    attempts: int = 0,
    first_attempt_ago: timedelta | None = None,
    available_ago: timedelta = timedelta(0),
    provider_id: str | None = None,
    sent_ago: timedelta | None = None,
    lease_token: uuid.UUID | None = None,
    locked_for: timedelta | None = None,
    key: str | None = None,
) -> str:
    """One outbox row; times are given as 'this long ago' relative to the database clock."""
    key = key or message_key(account, livemode, invoice_id)
    if status == "processing" and lease_token is None:
        lease_token = uuid.uuid4()
        locked_for = locked_for if locked_for is not None else timedelta(minutes=2)
    db.execute(
        """INSERT INTO email_outbox
               (message_key, purpose, account, livemode, invoice_id, source_event_id, fingerprint,
                payload, status, review_reason, attempts, first_attempt_at, available_at,
                provider_id, sent_at, lease_token, locked_until)
           VALUES (%s, 'invoice-paid', %s, %s, %s, 'evt_1Source', %s, %s, %s, %s, %s,
                   now() - %s::interval, now() - %s::interval, %s, now() - %s::interval,
                   %s, now() + %s::interval)""",
        (
            key,
            account,
            livemode,
            invoice_id,
            "sha256:" + "0" * 64,
            Jsonb(payload(key)) if with_payload else None,
            status,
            review_reason,
            attempts,
            first_attempt_ago,
            available_ago,
            provider_id,
            sent_ago,
            lease_token,
            locked_for,
        ),
    )
    return key


def insert_attempt(
    db: Db,
    key: str,
    *,
    attempt: int = 1,
    started_ago: timedelta = timedelta(minutes=1),
    finished: bool = True,
    http_status: int | None = 200,
    outcome: str | None = "sent",
    provider_id: str | None = None,
    provider_error: str | None = None,
    lease_token: uuid.UUID | None = None,
    duration: timedelta = timedelta(milliseconds=250),
    worker_id: str = "worker-a:1234",
) -> None:
    """One email_attempts row; ``finished=False`` leaves it in flight (outcome NULL)."""
    db.execute(
        """INSERT INTO email_attempts
               (message_key, attempt, worker_id, lease_token, started_at, finished_at,
                http_status, provider_error, provider_id, outcome)
           VALUES (%s, %s, %s, %s, now() - %s::interval,
                   CASE WHEN %s THEN now() - %s::interval + %s::interval END, %s, %s, %s, %s)""",
        (
            key,
            attempt,
            worker_id,
            lease_token or uuid.uuid4(),
            started_ago,
            finished,
            started_ago,
            duration,
            http_status if finished else None,
            provider_error if finished else None,
            provider_id if finished else None,
            outcome if finished else None,
        ),
    )


def insert_conflict_event(db: Db, key: str, event_id: str = "evt_1Conflict") -> None:
    db.execute(
        """INSERT INTO stripe_events
               (event_id, event_type, account, livemode, outcome, message_key, fingerprint)
           VALUES (%s, 'invoice.paid', 'platform', false, 'conflict', %s, 'sha256:other')""",
        (event_id, key),
    )


def row(db: Db, key: str) -> dict[str, Any]:
    found = db.execute("SELECT * FROM email_outbox WHERE message_key = %s", (key,)).fetchone()
    assert found is not None, key
    return found


def actions(db: Db, key: str) -> list[dict[str, Any]]:
    return db.execute(
        "SELECT * FROM operator_actions WHERE message_key = %s ORDER BY id", (key,)
    ).fetchall()


def insert_pending(db: Db, count: int, prefix: str = "in_1Work") -> list[str]:
    """Pending rows shaped like ingest's, created in bulk."""
    rows = db.execute(
        """INSERT INTO email_outbox (message_key, purpose, account, livemode, invoice_id,
                                     source_event_id, fingerprint, payload)
           SELECT 'platform/test/' || inv || '/invoice-paid', 'invoice-paid', 'platform',
                  false, inv, 'evt_' || inv, 'sha256:' || inv,
                  jsonb_build_object('from', 'billing@example.com',
                                     'to', jsonb_build_array('jenny.rosen@example.com'),
                                     'subject', 'Receipt for ' || inv,
                                     'text', 'Thanks', 'html', '<p>Thanks</p>',
                                     'tags', jsonb_build_array(jsonb_build_object(
                                         'name', 'message_key',
                                         'value', 'platform_test_' || inv || '_invoice-paid')))
             FROM (SELECT %s || lpad(n::text, 6, '0') AS inv
                     FROM generate_series(1, %s) AS n) AS invoices
           RETURNING message_key""",
        (prefix, count),
    ).fetchall()
    return sorted(row["message_key"] for row in rows)
