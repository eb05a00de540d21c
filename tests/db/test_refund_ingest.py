"""Refund receipts and credit notes at ingest: one outbox row per refund, whatever the events.

The webhook on a real database, the refund's invoice and credit notes from the
fake Stripe API (a real HTTP server). The emails themselves are rendered by
the worker from these rows; here the rows are what is checked: one per key,
the render input each kind of email is made from, and each refund claimed by
exactly one email (``refund_claims``), also under two racing transactions.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient
from psycopg.rows import dict_row

from receipts.commands import timeline_text
from receipts.config import Settings, load_settings
from receipts.db import Database
from receipts.ingest.deriving import ReceiptDeriver
from receipts.ingest.store import IngestResult, ingest
from receipts.operations.stripe_status import read_stripe_status, stripe_problems
from receipts.operations.timeline import read_timeline
from receipts.receipt.event import parse_event
from receipts.stripe_api.client import StripeApi
from receipts.web import create_app
from tests import stripe_events
from tests import stripe_objects as objects
from tests.fake_provider import FakeProviderClient
from tests.fake_stripe_api import FakeStripeClient, running_fake_stripe_api
from tests.helpers import wait_for
from tests.sessions import waiting_on_a_lock
from tests.stripe_events import TEST_SECRET
from tests.worker_runs import work

Row = dict[str, Any]
DB = psycopg.Connection[Row]
API_KEY = "rk_test_refunds"
BOOKS = "books@shop.example"


@pytest.fixture
def stripe_api() -> Iterator[FakeStripeClient]:
    with running_fake_stripe_api(API_KEY) as fake:
        yield fake


@pytest.fixture
def keyed_environ(environ: dict[str, str], stripe_api: FakeStripeClient) -> dict[str, str]:
    return {**environ, "STRIPE_API_KEY": API_KEY, "STRIPE_API_BASE": stripe_api.url}


def _app(environ: dict[str, str]) -> Iterator[Flask]:
    app = create_app(load_settings(environ))
    yield app
    app.extensions["receipts"].database.close()


@pytest.fixture
def web(keyed_environ: dict[str, str]) -> Iterator[FlaskClient]:
    yield from (app.test_client() for app in _app(keyed_environ))


@pytest.fixture
def copying_web(keyed_environ: dict[str, str]) -> Iterator[FlaskClient]:
    environ = {**keyed_environ, "RECEIPTS_COPY_TO": BOOKS}
    yield from (app.test_client() for app in _app(environ))


@pytest.fixture
def keyless_web(environ: dict[str, str]) -> Iterator[FlaskClient]:
    yield from (app.test_client() for app in _app(environ))


@dataclass(frozen=True)
class Paid:
    """A paid invoice in the fake API, with the PaymentIntent and charge that paid it."""

    invoice: Row
    payment_intent: str
    charge: str

    def refund(self, refund_id: str, amount: int = 1999, **kw: Any) -> Row:
        return objects.refund(refund_id, self.charge, self.payment_intent, amount=amount, **kw)

    def key(self, purpose: str) -> str:
        return f"platform/test/{self.invoice['id']}/{purpose}"


def paid(stripe_api: FakeStripeClient, name: str) -> Paid:
    invoice = objects.invoice(invoice_id=f"in_1{name}")
    charge, payment_intent = f"ch_1{name}", f"pi_1{name}"
    stripe_api.add(
        invoices=[invoice],
        customers=[objects.customer(invoice["customer"])],
        payment_intents=[objects.payment_intent(payment_intent, charge)],
        charges=[objects.charge(charge)],
        invoice_payments=[
            objects.invoice_payment(
                invoice["id"], {"type": "payment_intent", "payment_intent": payment_intent}
            )
        ],
    )
    return Paid({k: v for k, v in invoice.items() if k != "_all_lines"}, payment_intent, charge)


def deliver(client: FlaskClient, event: Row) -> Row:
    data, headers = objects.signed(event, TEST_SECRET)
    answer = client.post("/webhooks/stripe", data=data, headers=headers)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    document: Row = answer.get_json()
    return document


def rows(db: DB) -> list[Row]:
    return db.execute(
        "SELECT message_key, status, amount, customer_email, render_input"
        " FROM email_outbox ORDER BY message_key"
    ).fetchall()


def event_outcomes(db: DB) -> list[tuple[str, str, str | None]]:
    found = db.execute(
        "SELECT event_type, outcome, detail FROM stripe_events ORDER BY first_received_at"
    )
    return [(row["event_type"], row["outcome"], row["detail"]) for row in found]


def test_charge_refunded_then_refund_created_and_redeliveries_make_one_row(
    db: DB, web: FlaskClient, stripe_api: FakeStripeClient
) -> None:
    """Today's charge.refunded (no refunds list, no invoice) finds the refund and the
    invoice through the API; refund.created and five redeliveries of each collapse onto
    the same key. The row holds the render input the refund email is made from."""
    sale = paid(stripe_api, "Today")
    refund = sale.refund("re_1Today")
    stripe_api.add(refunds=[refund])
    charge_refunded = stripe_events.event(
        objects.refunded_charge(sale.charge, sale.payment_intent, [refund]),
        type="charge.refunded",
    )
    refund_created = stripe_events.event(refund, type="refund.created")
    answers = [deliver(web, charge_refunded), deliver(web, refund_created)]
    answers += [deliver(web, event) for event in [refund_created, charge_refunded] * 2]

    key = sale.key("refund-re_1Today")
    assert [(a["outcome"], a["message_key"]) for a in answers[:2]] == [
        ("queued", key),
        ("duplicate", key),
    ]
    [row] = rows(db)
    assert (row["message_key"], row["status"]) == (key, "pending")
    assert (row["amount"], row["customer_email"]) == (1999, "jenny.rosen@example.com")
    render_input = row["render_input"]
    assert render_input["kind"] == "refund" and render_input["refund"] == refund
    assert render_input["invoice"]["id"] == sale.invoice["id"]
    assert render_input["invoice"]["number"] == sale.invoice["number"]
    assert render_input["api_facts"]["payment_method"]["last4"] == "4242"
    claims = db.execute("SELECT refund_id, message_key FROM refund_claims").fetchall()
    assert claims == [{"refund_id": "re_1Today", "message_key": key}]
    asked = {request["path"] for request in stripe_api.requests()}
    assert {"/v1/refunds", "/v1/invoice_payments", "/v1/credit_notes"} <= asked


def test_refund_created_first_and_the_old_charge_shape_make_one_row_without_listing_refunds(
    db: DB, web: FlaskClient, stripe_api: FakeStripeClient
) -> None:
    """refund.created, then a charge.refunded of an API version before 2022-11-15
    (``refunds.data`` and ``invoice`` on the charge): one row; the old charge's
    refunds and invoice are read from the event, not the API."""
    sale = paid(stripe_api, "Old")
    refund = sale.refund("re_1Old")
    old_charge = objects.refunded_charge(
        sale.charge, sale.payment_intent, [refund], invoice_id=sale.invoice["id"]
    )
    first = deliver(web, stripe_events.event(refund, type="refund.created"))
    asked_before = len(stripe_api.requests())
    second = deliver(web, stripe_events.event(old_charge, type="charge.refunded"))
    asked = stripe_api.requests()[asked_before:]

    assert (first["outcome"], second["outcome"]) == ("queued", "duplicate")
    assert [row["message_key"] for row in rows(db)] == [sale.key("refund-re_1Old")]
    assert [request for request in asked if request["path"] == "/v1/refunds"] == []
    assert [request for request in asked if "payment[type]" in request["query"]] == []


def test_two_partial_refunds_are_two_rows_and_a_charge_naming_both_adds_none(
    db: DB, web: FlaskClient, stripe_api: FakeStripeClient
) -> None:
    """A partial refund and a later second one: two emails, each with its own amount;
    the second refund's charge.refunded lists both refunds and yields no third row."""
    sale = paid(stripe_api, "Partial")
    first, second = sale.refund("re_1PartA", 500), sale.refund("re_1PartB", 700)
    deliver(web, stripe_events.event(first, type="refund.created"))
    stripe_api.add(refunds=[first, second])
    both = objects.refunded_charge(sale.charge, sale.payment_intent, [first, second])
    answer = deliver(web, stripe_events.event(both, type="charge.refunded"))

    assert answer["outcome"] == "queued"
    assert [(row["message_key"], row["amount"]) for row in rows(db)] == [
        (sale.key("refund-re_1PartA"), 500),
        (sale.key("refund-re_1PartB"), 700),
    ]
    # `receipts show` names the email and the refund's own amount, not the invoice's.
    shown = timeline_text.render(read_timeline(db, sale.key("refund-re_1PartB"))).splitlines()
    assert shown[1] == "  email         Refund receipt re_1PartB ($7.00)"
    assert shown[3].startswith(f"  invoice       {sale.invoice['id']} ({sale.invoice['number']})")


def test_a_refund_that_has_not_succeeded_waits_for_the_update_that_says_it_did(
    db: DB, web: FlaskClient, stripe_api: FakeStripeClient
) -> None:
    """refund.created pending, refund.updated failed: no row; refund.updated succeeded: one."""
    sale = paid(stripe_api, "Pending")
    for status, event_type in [("pending", "refund.created"), ("failed", "refund.updated")]:
        refund = sale.refund("re_1Pending", status=status)
        deliver(web, stripe_events.event(refund, type=event_type))
    assert rows(db) == []
    deliver(web, stripe_events.event(sale.refund("re_1Pending"), type="refund.updated"))
    assert [row["message_key"] for row in rows(db)] == [sale.key("refund-re_1Pending")]
    assert event_outcomes(db) == [
        ("refund.created", "ignored", "refund_not_succeeded"),
        ("refund.updated", "ignored", "refund_not_succeeded"),
        ("refund.updated", "queued", None),
    ]


def test_a_credit_note_with_its_refund_is_one_email_in_either_order(
    db: DB, web: FlaskClient, stripe_api: FakeStripeClient
) -> None:
    """Credit note first: the refund's events find it among the invoice's credit notes and
    land on its key. Refund first, while the credit note already exists in Stripe: the
    same. Either way one row, the credit note's, which claims the refund."""
    for name, refund_first in [("NoteFirst", False), ("RefundFirst", True)]:
        sale = paid(stripe_api, name)
        refund = sale.refund(f"re_1{name}")
        note = objects.credit_note(f"cn_1{name}", sale.invoice["id"], refund_id=refund["id"])
        stripe_api.add(refunds=[refund], credit_notes=[note])
        events = [
            stripe_events.event(note, type="credit_note.created"),
            stripe_events.event(refund, type="refund.created"),
            stripe_events.event(
                objects.refunded_charge(sale.charge, sale.payment_intent, [refund]),
                type="charge.refunded",
            ),
        ]
        for event in events[::-1] if refund_first else events:
            deliver(web, event)
        key = sale.key(f"credit-note-cn_1{name}")
        [row] = [row for row in rows(db) if sale.invoice["id"] in row["message_key"]]
        assert row["message_key"] == key
        assert row["render_input"]["kind"] == "credit_note"
        assert row["render_input"]["credit_note"] == note
        claim = db.execute(
            "SELECT message_key FROM refund_claims WHERE refund_id = %s", (refund["id"],)
        ).fetchone()
        assert claim == {"message_key": key}


def test_a_refund_emailed_before_its_credit_note_existed_keeps_the_credit_note_silent(
    db: DB, web: FlaskClient, stripe_api: FakeStripeClient
) -> None:
    """The refund's email went out before any credit note carried it; a credit note made
    later for that refund is recorded as ignored (refund_already_emailed), no second row.
    A credit note without a refund (credit to the balance) is its own email."""
    sale = paid(stripe_api, "Late")
    refund = sale.refund("re_1Late")
    deliver(web, stripe_events.event(refund, type="refund.created"))
    note = objects.credit_note("cn_1Late", sale.invoice["id"], refund_id=refund["id"])
    answer = deliver(web, stripe_events.event(note, type="credit_note.created"))
    balance_note = objects.credit_note("cn_1Balance", sale.invoice["id"], amount=300)
    deliver(web, stripe_events.event(balance_note, type="credit_note.created"))

    assert (answer["outcome"], answer["message_key"]) == ("ignored", sale.key("refund-re_1Late"))
    assert [(row["message_key"], row["amount"]) for row in rows(db)] == [
        (sale.key("credit-note-cn_1Balance"), 300),
        (sale.key("refund-re_1Late"), 1999),
    ]
    assert event_outcomes(db)[1] == ("credit_note.created", "ignored", "refund_already_emailed")


def test_what_makes_no_refund_or_credit_note_email_is_recorded_with_its_reason(
    db: DB, web: FlaskClient, stripe_api: FakeStripeClient
) -> None:
    """A refund of a charge no invoice paid, a credit note of an unpaid invoice, one issued
    before the payment (already on the receipt): recorded as ignored, each with its reason."""
    bare = objects.refund("re_1Bare", "ch_1Bare", "pi_1Bare")
    unpaid = objects.invoice(invoice_id="in_1Unpaid", status="open")
    stripe_api.add(invoices=[unpaid])
    open_note = objects.credit_note("cn_1Open", "in_1Unpaid")
    early_note = {**objects.credit_note("cn_1Early", "in_1Unpaid"), "type": "pre_payment"}
    for event in [
        stripe_events.event(bare, type="refund.created"),
        stripe_events.event(open_note, type="credit_note.created"),
        stripe_events.event(early_note, type="credit_note.created"),
    ]:
        deliver(web, event)
    assert rows(db) == []
    assert event_outcomes(db) == [
        ("refund.created", "ignored", "refund_without_invoice"),
        ("credit_note.created", "ignored", "invoice_not_paid"),
        ("credit_note.created", "ignored", "credit_note_before_payment"),
    ]


def test_without_an_api_key_refunds_are_recorded_and_status_says_what_to_set(
    db: DB, keyless_web: FlaskClient, web: FlaskClient, stripe_api: FakeStripeClient
) -> None:
    """No STRIPE_API_KEY: the events are stored as ignored (needs_stripe_api_key), with no
    row, and `receipts status` counts them and names the setting. Delivered again once a
    key is set (the Dashboard's resend, `receipts replay`), they make their rows."""
    sale = paid(stripe_api, "Keyless")
    refund = sale.refund("re_1Keyless")
    note = objects.credit_note("cn_1Keyless", sale.invoice["id"])
    events = [
        stripe_events.event(refund, type="refund.created"),
        stripe_events.event(note, type="credit_note.created"),
    ]
    for event in events:
        deliver(keyless_web, event)
    assert rows(db) == []
    assert {detail for _, _, detail in event_outcomes(db)} == {"needs_stripe_api_key"}
    status = read_stripe_status(db)
    assert (status.waiting_for_api_key_24h, status.waiting_for_api_key_30d) == (2, 2)
    [problem] = stripe_problems(status, max_pending_age=900)
    assert "STRIPE_API_KEY" in problem and "2 refund or credit-note event(s)" in problem

    for event in events:
        assert deliver(web, event)["redelivery"] is True
    assert [row["message_key"] for row in rows(db)] == [
        sale.key("credit-note-cn_1Keyless"),
        sale.key("refund-re_1Keyless"),
    ]


def test_stripe_api_unreachable_answers_503_so_stripe_delivers_the_refund_again(
    db: DB, web: FlaskClient, stripe_api: FakeStripeClient
) -> None:
    """A look-up that fails stores nothing and answers 503; the redelivery makes the row."""
    sale = paid(stripe_api, "Flaky")
    event = stripe_events.event(sale.refund("re_1Flaky"), type="refund.created")
    stripe_api.script({"status": 500, "path": "/v1/invoice_payments"})
    data, headers = objects.signed(event, TEST_SECRET)
    assert web.post("/webhooks/stripe", data=data, headers=headers).status_code == 503
    assert event_outcomes(db) == []
    assert deliver(web, event)["outcome"] == "queued"


@pytest.mark.parametrize("holder_commits", [True, False])
def test_two_transactions_claiming_one_refund_one_wins(
    database_url: str, db: DB, stripe_api: FakeStripeClient, keyed_environ: dict[str, str],
    holder_commits: bool,
) -> None:  # fmt: skip
    """The credit note's row and claim are held uncommitted while the refund's ingest
    starts and waits on the claim. If the credit note commits, the refund is recorded as
    ignored (refund_in_credit_note) and gets no row; if it rolls back, the refund wins."""
    sale = paid(stripe_api, "Race")
    refund = sale.refund("re_1Race")
    note = objects.credit_note("cn_1Race", sale.invoice["id"], refund_id=refund["id"])
    settings = load_settings(keyed_environ)
    deriver = ReceiptDeriver(settings, StripeApi.from_settings(settings))
    note_header = parse_event(stripe_events.event(note, type="credit_note.created"))
    refund_header = parse_event(stripe_events.event(refund, type="refund.created"))
    note_decision, refund_decision = deriver.derive(note_header), deriver.derive(refund_header)
    database = Database(database_url)
    results: list[IngestResult] = []
    with psycopg.connect(database_url, row_factory=dict_row) as holder:
        with holder.transaction(force_rollback=not holder_commits):
            assert ingest(holder, note_header, note_decision).outcome == "queued"

            def deliver_refund() -> None:
                with database.autocommit() as conn:
                    results.append(ingest(conn, refund_header, refund_decision))

            racer = threading.Thread(target=deliver_refund)
            racer.start()
            wait_for(lambda: waiting_on_a_lock(db), 10, "the refund's claim to wait")
        racer.join(timeout=10)
    database.close()

    [result] = results
    keys = [row["message_key"] for row in rows(db)]
    if holder_commits:
        assert (result.outcome, result.detail) == ("ignored", "refund_in_credit_note")
        assert keys == [sale.key("credit-note-cn_1Race")]
    else:
        assert result.outcome == "queued"
        assert keys == [sale.key("refund-re_1Race")]
    assert db.execute("SELECT count(*) AS n FROM refund_claims").fetchone() == {"n": 1}


def test_with_pdfs_a_refund_and_its_copy_for_the_books_carry_one_refund_pdf(
    copying_web: FlaskClient,
    stripe_api: FakeStripeClient,
    fake: FakeProviderClient,
    worker_settings: Settings,
) -> None:
    """RECEIPTS_ATTACH_PDF and RECEIPTS_COPY_TO: the worker renders both rows of one refund
    with the same PDF, named after the invoice as a refund (never as its receipt)."""
    sale = paid(stripe_api, "Pdf")
    refund = sale.refund("re_1Pdf")
    stripe_api.add(refunds=[refund])
    deliver(copying_web, stripe_events.event(refund, type="refund.created"))
    settings = replace(worker_settings, attach_pdf=True, copy_to=BOOKS)
    assert work(settings).sent == 2
    key = sale.key("refund-re_1Pdf")
    by_key = {sent["key"]: json.loads(sent["body"]) for sent in fake.deliveries()}
    assert sorted(by_key) == [key, key + "-copy"]
    [customer_pdf] = by_key[key]["attachments"]
    assert by_key[key + "-copy"]["attachments"] == [customer_pdf]
    assert customer_pdf["filename"] == f"refund-{sale.invoice['number']}.pdf"
    assert base64.b64decode(customer_pdf["content"]).startswith(b"%PDF-")
