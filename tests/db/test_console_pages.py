"""The console's reading pages against a real database: search, timeline, review, status.

Receipts come in as Stripe sends them (a signed invoice.paid to the app's own
webhook route), so each page shows what ingest really stores.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from tests import stripe_events
from tests.console_client import Clock, console_app, console_environ, ingest, log_in
from tests.outbox_states import Db, insert_attempt, insert_row

NOW = datetime(2026, 12, 1, 15, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> Clock:
    return Clock(NOW)


@pytest.fixture
def web(environ: dict[str, str], clock: Clock) -> Iterator[FlaskClient]:
    with console_app(console_environ(environ), clock) as app:
        client = app.test_client()
        assert log_in(client, "victor").status_code == 303
        yield client


def _text(page: TestResponse) -> str:
    html = page.get_data(as_text=True)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_an_invoice_number_with_one_receipt_opens_its_timeline(web: FlaskClient) -> None:
    """ACME-0102 arrived without a customer email: the search goes straight to the
    receipt, which says why it waits and what settles it; the invoice link is not shown."""
    invoice = stripe_events.invoice(id="in_1QAcme0102", number="ACME-0102", customer_email=None)
    key = ingest(web, invoice)
    found = web.get("/console/?q=acme-0102")
    assert found.status_code == 303
    assert found.headers["Location"] == f"/console/receipt/{key}"
    page = web.get(found.headers["Location"])
    text = _text(page)
    assert page.status_code == 200
    assert "ACME-0102 $19.99" in text
    assert "needs a person: missing_customer_email" in text
    assert "The paid invoice has no customer email address" in text
    assert "Stripe sent invoice.paid" in text
    html = page.get_data(as_text=True)
    assert "invoice.stripe.com" not in html and "pay.stripe.com" not in html


def test_an_address_lists_every_receipt_to_it_newest_first(web: FlaskClient) -> None:
    first = ingest(web, stripe_events.invoice(number="ACME-0100", customer_email="j@example.com"))
    second = ingest(web, stripe_events.invoice(number="ACME-0101", customer_email="J@example.com"))
    page = web.get("/console/?q=j@example.com")
    text = _text(page)
    assert page.status_code == 200
    assert "2 receipts for email address “j@example.com”" in text
    html = page.get_data(as_text=True)
    assert html.index(f"/console/receipt/{second}") < html.index(f"/console/receipt/{first}")
    assert "waiting to be sent" in text


def test_a_search_that_finds_nothing_says_what_that_means(web: FlaskClient) -> None:
    text = _text(web.get("/console/?q=ACME-9999"))
    assert "No receipt and no Stripe event for invoice number “ACME-9999”" in text
    assert "receipts reconcile" in text


def test_an_event_that_made_no_receipt_is_shown_with_its_reason(web: FlaskClient) -> None:
    zero = stripe_events.invoice(number="ACME-0000", amount_paid=0, amount_due=0, total=0)
    ingest(web, zero)
    page = web.get("/console/?q=ACME-0000")
    assert page.status_code == 200
    assert "total is zero (a trial, a 100% coupon); such invoices get no receipt" in _text(page)


def test_a_query_no_receipt_can_have_is_a_bad_request(web: FlaskClient) -> None:
    assert web.get("/console/?q=" + "x" * 400).status_code == 400
    assert web.get("/console/?q=a%00b").status_code == 400


def test_a_timeline_shows_attempts_with_the_provider_answers_in_order(
    web: FlaskClient, db: Db
) -> None:
    """Each attempt with its HTTP status, error, message and provider id, oldest first;
    the frozen email's body never appears."""
    key = insert_row(db, "in_1Tl", status="review", review_reason="attempts_exhausted", attempts=2)
    insert_attempt(
        db,
        key,
        attempt=1,
        started_ago=timedelta(minutes=9),
        http_status=503,
        outcome="retry",
        provider_error="internal_server_error",
    )
    insert_attempt(
        db, key, attempt=2, started_ago=timedelta(minutes=4), http_status=None, outcome="retry"
    )
    page = web.get(f"/console/receipt/{key}")
    text = _text(page)
    assert text.index("Send attempt #1") < text.index("Send attempt #2")
    assert "HTTP 503" in text and "internal_server_error" in text
    assert "no answer (timeout or connection error); the provider may have accepted it" in text
    assert "Every allowed attempt failed" in text
    assert "Thank you for your payment" not in page.get_data(as_text=True)


def test_an_unknown_receipt_is_not_found(web: FlaskClient) -> None:
    assert web.get("/console/receipt/platform/test/in_1None/invoice-paid").status_code == 404


def test_the_review_queue_lists_reason_age_amount_and_last_error(web: FlaskClient, db: Db) -> None:
    ingest(
        web,
        stripe_events.invoice(
            number="ACME-0102", customer_email=None, amount_paid=4900, total=4900, amount_due=4900
        ),
    )
    refused = insert_row(db, "in_1Refused", status="review", review_reason="validation_error")
    insert_attempt(
        db, refused, http_status=422, outcome="review", provider_error="validation_error"
    )
    page = web.get("/console/review")
    text = _text(page)
    assert "2 receipts waiting for a person, oldest first." in text
    assert "missing_customer_email" in text and "$49.00" in text
    assert "validation_error" in text and "HTTP 422" in text
    assert "Waiting" in text
    only = _text(web.get("/console/review?reason=validation_error"))
    assert "1 receipt waiting for a person with reason validation_error" in only
    assert "missing_customer_email" not in only.split("oldest first.")[1]


def test_the_status_page_charts_each_of_the_last_30_days(web: FlaskClient, db: Db) -> None:
    """Sent, went to review and not delivered per day, in RECEIPTS_TIMEZONE (UTC here):
    30 bars per chart, each day's count in its bar's title and in the table."""
    sent_now = NOW - datetime.now(UTC)  # the rows' times are relative to the database clock
    for days_ago, count in ((0, 2), (3, 1), (29, 1), (30, 5)):
        for n in range(count):
            insert_row(
                db,
                f"in_1Sent{days_ago}x{n}",
                status="sent",
                provider_id=f"re_{days_ago}{n}",
                sent_ago=timedelta(days=days_ago, minutes=1) - sent_now,
            )
    ingest(web, stripe_events.invoice(customer_email=None))  # went to review today (db clock)
    page = web.get("/console/status")
    html = page.get_data(as_text=True)
    assert page.status_code == 200
    assert html.count('<rect class="bar"') == 90
    assert "<title>2026-12-01: 2</title>" in html
    assert "<title>2026-11-28: 1</title>" in html
    assert "<title>2026-11-02: 1</title>" in html  # 29 days ago: the first day shown
    assert "2026-11-01" not in html  # 30 days ago: outside
    text = _text(page)
    assert "Sent: 4 in 30 days" in text
    assert "1 receipt(s) need a person." in text
