"""A support team's database, as the console shows it: the browser tier and screenshots.

Receipts arrive as Stripe sends them (signed invoice.paid events to the app's
own webhook route), and a month of history is added as the worker would have
left it, so the status chart and the review queue look as they do in use.
The incident: ACME-0102 was paid without a customer email, and sits in review.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
from flask.testing import FlaskClient

from tests import stripe_events
from tests.console_client import ingest
from tests.outbox_states import insert_attempt, insert_row

ACME_0102 = "in_1QAcme0102Jenny"


def incident(client: FlaskClient) -> str:
    """ACME-0102, $49.00, paid without a customer email; its receipt's key."""
    invoice = stripe_events.invoice(
        id=ACME_0102,
        number="ACME-0102",
        customer_email=None,
        customer_name="Jenny Rosen",
        amount_due=4900,
        amount_paid=4900,
        total=4900,
    )
    return ingest(client, invoice, event_id="evt_1QAcme0102Paid")


def busy_month(client: FlaskClient, db: psycopg.Connection[dict[str, Any]]) -> None:
    """A month of receipts: most sent, a few in review for other reasons, one bounced."""
    for n, email in enumerate(("mo@example.com", "li.wei@example.net", "mo@example.com")):
        ingest(client, stripe_events.invoice(number=f"ACME-{110 + n:04d}", customer_email=email))
    for day in range(30):
        for n in range(3 + (day * 7) % 5):
            insert_row(
                db,
                f"in_1Hist{day:02d}x{n}",
                status="sent",
                provider_id=f"4ef9a417-{day:04d}-4d39-ad75-{n:012d}",
                sent_ago=timedelta(days=day, hours=n),
            )
    tired = insert_row(
        db, "in_1QAcme0097", status="review", review_reason="attempts_exhausted", attempts=10
    )
    for attempt in range(1, 11):
        insert_attempt(
            db,
            tired,
            attempt=attempt,
            started_ago=timedelta(hours=22 - 2 * attempt),
            http_status=503,
            outcome="retry",
            provider_error="internal_server_error",
        )
    refused = insert_row(
        db, "in_1QAcme0099", status="review", review_reason="validation_error", attempts=1
    )
    insert_attempt(
        db,
        refused,
        started_ago=timedelta(hours=5),
        http_status=422,
        outcome="review",
        provider_error="validation_error",
    )
    db.execute(
        "UPDATE email_outbox SET invoice_number = 'ACME-0097', amount = 12900, currency = 'usd', "
        "customer_email = 'ap@globex.example', last_error = 'HTTP 503 internal_server_error', "
        "created_at = now() - interval '21 hours', first_attempt_at = now() - interval '20 hours' "
        "WHERE message_key = %s",
        (tired,),
    )
    db.execute(
        "UPDATE email_outbox SET invoice_number = 'ACME-0099', amount = 2500, currency = 'usd', "
        "customer_email = 'tom@exmaple.com', last_error = 'HTTP 422 validation_error', "
        "created_at = now() - interval '5 hours', first_attempt_at = now() - interval '5 hours' "
        "WHERE message_key = %s",
        (refused,),
    )
    db.execute(
        "UPDATE email_outbox SET delivery_status = 'bounced', delivery_status_at = now() - "
        "interval '2 days', delivery_detail = 'mailbox does not exist' "
        "WHERE message_key = 'platform/test/in_1Hist02x1/invoice-paid'"
    )
