"""The copy for the books: RECEIPTS_COPY_TO gives each receipt a second row of its own.

docs/architecture.md, "The copy for the books": the copy is inserted with the
customer's row, rendered from the same input with only ``to`` changed, and sent
once, independently of the customer's receipt.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient

from receipts.config import Settings, load_settings
from receipts.environment import ConfigError
from receipts.web import create_app
from tests import stripe_events
from tests.fake_provider import FakeProviderClient
from tests.stripe_events import TEST_SECRET, encode, sign
from tests.worker_runs import work

DB = psycopg.Connection[dict[str, Any]]
BOOKS = "books@shop.example"
KEY = "platform/test/in_1Books/invoice-paid"
COPY_KEY = KEY + "-copy"


@pytest.fixture
def copying_client(environ: dict[str, str]) -> Iterator[FlaskClient]:
    app: Flask = create_app(load_settings({**environ, "RECEIPTS_COPY_TO": BOOKS}))
    try:
        yield app.test_client()
    finally:
        app.extensions["receipts"].database.close()


@pytest.fixture
def copying_worker(worker_settings: Settings) -> Settings:
    return replace(worker_settings, copy_to=BOOKS)


def deliver(client: FlaskClient, event: dict[str, Any]) -> dict[str, Any]:
    body = encode(event)
    response = client.post(
        "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
    )
    assert response.status_code == 200 and response.json is not None, response.json
    answer: dict[str, Any] = response.json
    return answer


def rows(db: DB, invoice_id: str) -> dict[str, dict[str, Any]]:
    found = db.execute(
        "SELECT message_key, purpose, status, customer_email, review_reason, payload "
        "FROM email_outbox WHERE invoice_id = %s",
        (invoice_id,),
    ).fetchall()
    return {row["message_key"]: row for row in found}


def test_one_invoice_gives_two_rows_each_sent_once_with_the_same_content(
    copying_client: FlaskClient, db: DB, fake: FakeProviderClient, copying_worker: Settings
) -> None:
    """Redelivered three times: still two rows; the copy is the customer's email to the books."""
    event = stripe_events.event(stripe_events.invoice(id="in_1Books"))
    for _ in range(3):
        assert deliver(copying_client, event)["message_key"] == KEY
    stored = rows(db, "in_1Books")
    assert sorted(stored) == [KEY, COPY_KEY]
    assert stored[COPY_KEY]["purpose"] == "invoice-paid-copy"
    assert stored[COPY_KEY]["customer_email"] == BOOKS
    assert (work(copying_worker).sent, work(copying_worker).sent) == (2, 0)
    by_key = {sent["key"]: json.loads(sent["body"]) for sent in fake.deliveries()}
    assert sorted(by_key) == [KEY, COPY_KEY]
    customer, copy = by_key[KEY], by_key[COPY_KEY]
    assert customer["to"] == ["jenny.rosen@example.com"] and copy["to"] == [BOOKS]
    assert "cc" not in customer and "bcc" not in customer
    for field in ("from", "subject", "text", "html"):
        assert copy[field] == customer[field]
    assert copy["tags"] == [
        {"name": "message_key", "value": "platform_test_in_1Books_invoice-paid-copy"}
    ]


def test_with_pdfs_the_copy_carries_the_customers_pdf_byte_for_byte(
    copying_client: FlaskClient, fake: FakeProviderClient, copying_worker: Settings
) -> None:
    deliver(copying_client, stripe_events.event(stripe_events.invoice(id="in_1Books")))
    assert work(replace(copying_worker, attach_pdf=True)).sent == 2
    by_key = {sent["key"]: json.loads(sent["body"]) for sent in fake.deliveries()}
    [customer_pdf] = by_key[KEY]["attachments"]
    assert by_key[COPY_KEY]["attachments"] == [customer_pdf]
    assert customer_pdf["filename"].startswith("receipt-")


def test_the_copy_refused_by_the_provider_leaves_the_customers_receipt_sent(
    copying_client: FlaskClient, db: DB, fake: FakeProviderClient, copying_worker: Settings
) -> None:
    """A 422 for the copy's key only: the copy goes to review, the customer's is sent."""
    deliver(copying_client, stripe_events.event(stripe_events.invoice(id="in_1Books")))
    fake.script({"status": 422, "name": "validation_error", "key": COPY_KEY})
    summary = work(copying_worker)
    assert (summary.sent, summary.review) == (1, 1)
    stored = rows(db, "in_1Books")
    assert stored[KEY]["status"] == "sent"
    assert stored[COPY_KEY]["status"] == "review"
    assert [sent["key"] for sent in fake.deliveries()] == [KEY]


def test_a_copy_to_an_address_the_worker_was_not_given_goes_to_review(
    copying_client: FlaskClient, db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """RECEIPTS_COPY_TO removed (or changed) before the worker ran: the copy is not sent
    anywhere the worker's own settings do not name; the customer's receipt is."""
    deliver(copying_client, stripe_events.event(stripe_events.invoice(id="in_1Books")))
    summary = work(replace(worker_settings, copy_to="someone-else@shop.example"))
    assert (summary.sent, summary.review) == (1, 1)
    copy = rows(db, "in_1Books")[COPY_KEY]
    assert (copy["status"], copy["review_reason"]) == ("review", "copy_address_not_configured")
    assert copy["payload"] is None
    assert [sent["key"] for sent in fake.deliveries()] == [KEY]


def test_no_copy_when_the_books_are_the_customer_or_the_receipt_needs_a_person(
    copying_client: FlaskClient, db: DB
) -> None:
    """The customer's own address would get the same email twice; a receipt in review
    has no email to copy yet."""
    deliver(
        copying_client,
        stripe_events.event(
            stripe_events.invoice(id="in_1Self", customer_email="Books@Shop.example")
        ),
    )
    deliver(
        copying_client,
        stripe_events.event(stripe_events.invoice(id="in_1NoAddress", customer_email=None)),
    )
    assert sorted(rows(db, "in_1Self")) == ["platform/test/in_1Self/invoice-paid"]
    assert [row["status"] for row in rows(db, "in_1NoAddress").values()] == ["review"]


def test_without_the_setting_there_is_no_copy(client: FlaskClient, db: DB) -> None:
    deliver(client, stripe_events.event(stripe_events.invoice(id="in_1Books")))
    assert sorted(rows(db, "in_1Books")) == [KEY]


def test_copy_to_must_be_an_address() -> None:
    with pytest.raises(ConfigError, match="RECEIPTS_COPY_TO"):
        load_settings({"RECEIPTS_COPY_TO": "the accountant"})
