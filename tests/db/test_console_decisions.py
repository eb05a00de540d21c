"""Decisions from the console: the command line's operations, their guards, the user's name.

An operator (olga) decides; a viewer (victor) reads and is refused. Every
decision is checked in the database: the rows it changed, and the operator
action recorded under the console user's name with the form's reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from receipts.operations.resending import resend
from receipts.operations.review import Decider
from tests import stripe_events
from tests.console_client import console_app, console_environ, csrf_of, ingest, log_in
from tests.outbox_states import Db, actions, insert_attempt, insert_row, row


@pytest.fixture
def app(environ: dict[str, str]) -> Iterator[Flask]:
    with console_app(console_environ(environ)) as built:
        yield built


def _client(app: Flask, name: str) -> FlaskClient:
    client = app.test_client()
    assert log_in(client, name).status_code == 303
    return client


@pytest.fixture
def olga(app: Flask) -> FlaskClient:
    return _client(app, "olga")


@pytest.fixture
def victor(app: Flask) -> FlaskClient:
    return _client(app, "victor")


@pytest.fixture
def no_email(olga: FlaskClient) -> str:
    """ACME-0102 paid without a customer email: in review, nothing sent."""
    invoice = stripe_events.invoice(id="in_1QAcme0102", number="ACME-0102", customer_email=None)
    return ingest(olga, invoice)


def _decide(client: FlaskClient, key: str, action: str, **fields: str) -> TestResponse:
    """Open the decision page and submit its form as a browser would."""
    page = client.get(f"/console/receipt/{key}/decide/{action}")
    assert page.status_code == 200, page.status_code
    html = page.get_data(as_text=True)
    seen = re.search(r'name="seen" value="([^"]+)"', html)
    assert seen is not None
    data = {"csrf_token": csrf_of(page), "seen": seen.group(1), **fields}
    return client.post(f"/console/receipt/{key}/decide/{action}", data=data)


def _text(page: TestResponse) -> str:
    html = page.get_data(as_text=True)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_a_resend_to_a_corrected_address_queues_it_under_the_users_name(
    olga: FlaskClient, no_email: str, db: Db
) -> None:
    """The decision page says where the email goes; the resend is queued to the address
    given, the receipt is settled by it, and both keys carry olga's decision."""
    page = _text(olga.get(f"/console/receipt/{no_email}/decide/resend"))
    assert "This sends the receipt to the address you give below : the invoice had none" in page
    answer = _decide(
        olga, no_email, "resend", to="jenny.rosen@example.com", reason="customer called"
    )
    assert answer.status_code == 303
    assert answer.headers["Location"] == f"/console/receipt/{no_email}?decided=resend"
    copy = row(db, f"{no_email}/resend-1")
    assert (copy["status"], copy["customer_email"]) == ("pending", "jenny.rosen@example.com")
    assert row(db, no_email)["resent_as"] == f"{no_email}/resend-1"
    [decision] = actions(db, no_email)
    assert (decision["action"], decision["performed_by"], decision["reason"]) == (
        "resend",
        "olga",
        "customer called",
    )
    assert decision["details"]["to"] == "jenny.rosen@example.com"
    timeline = _text(olga.get(f"/console/receipt/{no_email}?decided=resend"))
    assert "Your decision (resend) was recorded" in timeline
    assert "olga resent it" in timeline and "customer called" in timeline
    assert "jenny.rosen@example.com" in timeline


def test_a_viewer_reads_but_cannot_decide(victor: FlaskClient, no_email: str, db: Db) -> None:
    """No decision links for a viewer; the decision page and its form answer 403 and
    nothing changes."""
    receipt = _text(victor.get(f"/console/receipt/{no_email}"))
    assert "Only a console operator can decide" in receipt
    assert "Resend…" not in receipt
    assert victor.get(f"/console/receipt/{no_email}/decide/resend").status_code == 403
    token = csrf_of(victor.get(f"/console/receipt/{no_email}"))
    refused = victor.post(
        f"/console/receipt/{no_email}/decide/resend",
        data={"csrf_token": token, "to": "jenny.rosen@example.com", "reason": "me"},
    )
    assert refused.status_code == 403
    assert actions(db, no_email) == []
    assert db.execute("SELECT count(*) AS n FROM email_outbox").fetchone() == {"n": 1}


def test_a_decision_without_its_csrf_token_is_refused_and_changes_nothing(
    olga: FlaskClient, no_email: str, db: Db
) -> None:
    fields = {"to": "jenny.rosen@example.com", "reason": "forged"}
    url = f"/console/receipt/{no_email}/decide/resend"
    assert olga.post(url, data=fields).status_code == 403
    assert olga.post(url, data={**fields, "csrf_token": "guessed"}).status_code == 403
    assert actions(db, no_email) == [] and row(db, no_email)["resent_as"] is None


def test_a_guard_refuses_as_on_the_command_line_and_nothing_changes(
    olga: FlaskClient, no_email: str, db: Db
) -> None:
    """A second resend while the first is on its way is refused in the guard's words."""
    _decide(olga, no_email, "resend", to="jenny.rosen@example.com", reason="first")
    again = _decide(olga, no_email, "resend", to="jenny@example.org", reason="second")
    assert again.status_code == 409
    text = _text(again)
    assert "Refused: nothing was changed." in text
    assert "a resend would be another email to the customer" in text
    assert [a["reason"] for a in actions(db, no_email)] == ["first"]
    assert db.execute("SELECT count(*) AS n FROM email_outbox").fetchone() == {"n": 2}


def test_a_decision_about_a_state_the_page_did_not_show_is_refused(
    olga: FlaskClient, no_email: str, database_url: str, db: Db
) -> None:
    """Someone resends from the command line after olga opened the page: her dismissal
    is refused, and the page shows the receipt as it is now."""
    import psycopg
    from psycopg.rows import dict_row

    page = olga.get(f"/console/receipt/{no_email}/decide/dismiss")
    seen = re.search(r'name="seen" value="([^"]+)"', page.get_data(as_text=True))
    assert seen is not None
    with psycopg.connect(database_url, row_factory=dict_row) as conn, conn.transaction():
        resend(conn, no_email, Decider(performed_by="ann", reason="cli"), to="j@example.com")
    answer = olga.post(
        f"/console/receipt/{no_email}/decide/dismiss",
        data={"csrf_token": csrf_of(page), "seen": seen.group(1), "reason": "too late"},
    )
    assert answer.status_code == 409
    assert "This receipt changed since the page was opened" in _text(answer)
    assert [a["performed_by"] for a in actions(db, no_email)] == ["ann"]


def test_a_decision_needs_a_reason(olga: FlaskClient, no_email: str, db: Db) -> None:
    answer = _decide(olga, no_email, "dismiss", reason="   ")
    assert answer.status_code == 400
    assert "Say why" in _text(answer)
    assert row(db, no_email)["review_reason"] == "missing_customer_email"


def test_dismiss_retry_and_resolve_are_the_command_lines_decisions(
    olga: FlaskClient, no_email: str, db: Db
) -> None:
    tired = insert_row(db, "in_1Tired", status="review", review_reason="attempts_exhausted")
    insert_attempt(db, tired, http_status=500, outcome="retry")
    found = insert_row(db, "in_1Found", status="review", review_reason="attempts_exhausted")
    assert _decide(olga, no_email, "dismiss", reason="sent from Stripe").status_code == 303
    assert row(db, no_email)["review_reason"] == "dismissed"
    assert _decide(olga, tired, "retry", reason="provider is back").status_code == 303
    assert row(db, tired)["status"] == "pending"
    answer = _decide(
        olga,
        found,
        "resolve",
        provider_id="4ef9a417-02e9-4d39-ad75-9611e0fcc33c",
        sent_at="2026-11-29T10:00:00Z",
        reason="in Resend's logs",
    )
    assert answer.status_code == 303
    assert (row(db, found)["status"], row(db, found)["provider_id"]) == (
        "sent",
        "4ef9a417-02e9-4d39-ad75-9611e0fcc33c",
    )
    decided = [a for key in (no_email, tired, found) for a in actions(db, key)]
    by = {a["action"]: a["performed_by"] for a in decided}
    assert by == {"dismiss": "olga", "retry": "olga", "resolve": "olga"}


def test_a_bad_sent_at_is_refused_before_anything_is_decided(olga: FlaskClient, db: Db) -> None:
    found = insert_row(db, "in_1Bad", status="review", review_reason="attempts_exhausted")
    answer = _decide(olga, found, "resolve", provider_id="re_1", sent_at="yesterday", reason="x")
    assert answer.status_code == 400
    assert "is not an ISO 8601 time" in _text(answer)
    assert row(db, found)["status"] == "review"


def test_an_unknown_decision_or_receipt_is_not_found(olga: FlaskClient, no_email: str) -> None:
    assert olga.get(f"/console/receipt/{no_email}/decide/delete").status_code == 404
    unknown = "/console/receipt/platform/test/in_1No/invoice-paid/decide/resend"
    assert olga.get(unknown).status_code == 404
