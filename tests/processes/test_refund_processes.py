"""Refunds and credit notes through the real processes: one email per refund, whatever order.

``gunicorn wsgi:app`` as the Procfile starts it, with STRIPE_API_KEY pointing at
the fake Stripe API, receives every scenario's events (signed as Stripe signs
them); then ``receipts worker`` runs as a process of its own and sends to the
fake provider. One server for all scenarios:

a. ``charge.refunded`` then ``refund.created``; b. the reverse;
c. each of both redelivered five times; d. a credit note carrying a refund,
its events in both orders; e. two partial refunds.

Expected: one row and one email per refund (a's, b's and c's refund one each,
d's credit notes one each, e's two refunds two), and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
import requests

from tests import stripe_events
from tests import stripe_objects as objects
from tests.fake_provider import FakeProviderClient, running_fake_provider
from tests.fake_stripe_api import FakeStripeClient, running_fake_stripe_api
from tests.real_processes import (
    PROVIDER_KEY,
    Gunicorn,
    finish,
    start_worker,
    web_environ,
    worker_environ,
)
from tests.stripe_events import TEST_SECRET, sign

Row = dict[str, Any]
Db = psycopg.Connection[Row]
API_KEY = "rk_test_refund_processes"
Event = dict[str, Any]


@pytest.fixture
def stripe_api() -> Iterator[FakeStripeClient]:
    with running_fake_stripe_api(API_KEY) as fake:
        yield fake


@pytest.fixture
def provider() -> Iterator[FakeProviderClient]:
    with running_fake_provider(api_key=PROVIDER_KEY) as fake:
        yield fake


@pytest.fixture
def web(database_url: str, stripe_api: FakeStripeClient) -> Iterator[Gunicorn]:
    environ = web_environ(database_url, STRIPE_API_KEY=API_KEY, STRIPE_API_BASE=stripe_api.url)
    server = Gunicorn(environ).start()
    yield server
    server.stop()


class Sale:
    """A paid invoice in the fake API: its invoice, PaymentIntent and charge."""

    def __init__(self, stripe_api: FakeStripeClient, name: str) -> None:
        self.invoice = objects.invoice(invoice_id=f"in_1{name}")
        self.charge, self.payment_intent = f"ch_1{name}", f"pi_1{name}"
        stripe_api.add(
            invoices=[self.invoice],
            customers=[objects.customer(self.invoice["customer"])],
            payment_intents=[objects.payment_intent(self.payment_intent, self.charge)],
            charges=[objects.charge(self.charge)],
            invoice_payments=[
                objects.invoice_payment(
                    self.invoice["id"],
                    {"type": "payment_intent", "payment_intent": self.payment_intent},
                )
            ],
        )
        self.stripe_api = stripe_api

    def refund(self, refund_id: str, amount: int = 1999) -> Row:
        refund = objects.refund(refund_id, self.charge, self.payment_intent, amount=amount)
        self.stripe_api.add(refunds=[refund])
        return refund

    def charge_refunded(self, *refunds: Row) -> Event:
        """Today's shape: no refunds list, no invoice (the API is asked for both)."""
        charge = objects.refunded_charge(self.charge, self.payment_intent, list(refunds))
        return stripe_events.event(charge, type="charge.refunded")

    def key(self, purpose: str) -> str:
        return f"platform/test/{self.invoice['id']}/{purpose}"


def deliver(server: Gunicorn, event: Event) -> Row:
    body = json.dumps(event).encode()
    answer = requests.post(
        server.url + "/webhooks/stripe",
        data=body,
        headers={"Stripe-Signature": sign(body, TEST_SECRET), "Content-Type": "application/json"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    document: Row = answer.json()
    return document


def scenarios(stripe_api: FakeStripeClient) -> tuple[list[list[Event]], dict[str, str]]:
    """Each scenario's events in delivery order, and the key each email must have
    with the word its subject starts with."""
    stories: list[list[Event]] = []
    expected: dict[str, str] = {}
    a = Sale(stripe_api, "CaseA")
    refund = a.refund("re_1CaseA")
    stories.append([a.charge_refunded(refund), stripe_events.event(refund, type="refund.created")])
    expected[a.key("refund-re_1CaseA")] = "Refund"
    b = Sale(stripe_api, "CaseB")
    refund = b.refund("re_1CaseB")
    stories.append([stripe_events.event(refund, type="refund.created"), b.charge_refunded(refund)])
    expected[b.key("refund-re_1CaseB")] = "Refund"
    c = Sale(stripe_api, "CaseC")
    refund = c.refund("re_1CaseC")
    pair = [c.charge_refunded(refund), stripe_events.event(refund, type="refund.created")]
    stories.append(pair * 5)
    expected[c.key("refund-re_1CaseC")] = "Refund"
    for name, refund_first in [("CaseD1", False), ("CaseD2", True)]:
        d = Sale(stripe_api, name)
        refund = d.refund(f"re_1{name}")
        note = objects.credit_note(f"cn_1{name}", d.invoice["id"], refund_id=refund["id"])
        stripe_api.add(credit_notes=[note])
        note_events = [
            stripe_events.event(note, type="credit_note.created"),
            stripe_events.event(refund, type="refund.created"),
            d.charge_refunded(refund),
        ]
        stories.append(note_events[::-1] if refund_first else note_events)
        expected[d.key(f"credit-note-cn_1{name}")] = "Credit note"
    e = Sale(stripe_api, "CaseE")
    first, second = e.refund("re_1CaseE1", 500), e.refund("re_1CaseE2", 700)
    stories.append(
        [
            stripe_events.event(first, type="refund.created"),
            e.charge_refunded(first),
            stripe_events.event(second, type="refund.created"),
            e.charge_refunded(first, second),
        ]
    )
    expected[e.key("refund-re_1CaseE1")] = "Refund"
    expected[e.key("refund-re_1CaseE2")] = "Refund"
    return stories, expected


# In-process, the default run proves each order and the redeliveries
# (tests/db/test_refund_ingest.py); here gunicorn and a worker process do.
@pytest.mark.slow
def test_each_refund_is_one_email_whatever_the_order_and_redeliveries(
    db: Db,
    database_url: str,
    web: Gunicorn,
    stripe_api: FakeStripeClient,
    provider: FakeProviderClient,
) -> None:
    """Cases a to e on one gunicorn: one pending row per refund or credit note, then one
    email each from `receipts worker`, its subject the refund's or the credit note's."""
    stories, expected = scenarios(stripe_api)
    # Scenarios side by side (each in its own order), as Stripe delivers many at once.
    with ThreadPoolExecutor(max_workers=len(stories)) as pool:
        list(pool.map(lambda story: [deliver(web, event) for event in story], stories))
    found = db.execute("SELECT message_key, status FROM email_outbox ORDER BY 1").fetchall()
    assert found == [{"message_key": key, "status": "pending"} for key in sorted(expected)]
    claims = db.execute("SELECT count(*) AS n FROM refund_claims").fetchone()
    assert claims == {"n": 7}  # a, b, c, d1, d2 (claimed by their credit notes), e twice

    code, _, err = finish(start_worker(worker_environ(database_url, provider)))
    assert code == 0, err
    deliveries = provider.deliveries()
    assert sorted(delivery["key"] for delivery in deliveries) == sorted(expected)
    for delivery in deliveries:
        subject = json.loads(delivery["body"])["subject"]
        assert subject.startswith(expected[delivery["key"]]), (delivery["key"], subject)
    sent = db.execute("SELECT count(*) AS n FROM email_outbox WHERE status = 'sent'").fetchone()
    assert sent == {"n": len(expected)}
