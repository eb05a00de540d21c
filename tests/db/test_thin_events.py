"""Thin event notifications end to end: the webhook on a real database, the invoice from the
fake Stripe API (a real HTTP server), the email through the worker and the fake Resend."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient

from receipts.cli import main
from receipts.config import load_settings
from receipts.delivery.configured import provider_from_settings
from receipts.delivery.worker import run_worker
from receipts.ingest.deriving import IN_REQUEST_BUDGET_SECONDS
from receipts.web import create_app
from tests import stripe_events
from tests import stripe_objects as objects
from tests.fake_provider import FakeProviderClient, running_fake_provider
from tests.fake_stripe_api import FakeStripeClient, running_fake_stripe_api
from tests.helpers import METRICS_AUTH, ManualClock
from tests.stripe_events import TEST_SECRET

Row = dict[str, Any]
DB = psycopg.Connection[Row]
API_KEY = "rk_test_thin"
RESEND_KEY = "re_thin_test"


@pytest.fixture
def stripe_api() -> Iterator[FakeStripeClient]:
    with running_fake_stripe_api(API_KEY) as fake:
        yield fake


@pytest.fixture
def resend() -> Iterator[FakeProviderClient]:
    with running_fake_provider(api_key=RESEND_KEY) as fake:
        yield fake


@pytest.fixture
def thin_environ(environ: dict[str, str], stripe_api: FakeStripeClient) -> dict[str, str]:
    return {**environ, "STRIPE_API_KEY": API_KEY, "STRIPE_API_BASE": stripe_api.url}


@pytest.fixture
def thin_app(thin_environ: dict[str, str]) -> Iterator[Flask]:
    app = create_app(load_settings(thin_environ))
    yield app
    app.extensions["receipts"].database.close()


@pytest.fixture
def web(thin_app: Flask) -> FlaskClient:
    return thin_app.test_client()


def deliver(client: FlaskClient, body: dict[str, Any]) -> Any:
    data, headers = objects.signed(body, TEST_SECRET)
    return client.post("/webhooks/stripe", data=data, headers=headers)


def paid_invoice(stripe_api: FakeStripeClient, account: str = "platform", **kw: Any) -> Row:
    """A paid invoice in the fake API, its customer, and a card payment."""
    invoice = objects.invoice(**kw)
    suffix = invoice["id"][-10:]
    stripe_api.add(
        account,
        invoices=[invoice],
        customers=[objects.customer(invoice["customer"])],
        payment_intents=[objects.payment_intent(f"pi_{suffix}", f"ch_{suffix}")],
        charges=[objects.charge(f"ch_{suffix}")],
        invoice_payments=[
            objects.invoice_payment(
                invoice["id"], {"type": "payment_intent", "payment_intent": f"pi_{suffix}"}
            )
        ],
    )
    return {k: v for k, v in invoice.items() if k != "_all_lines"}


def emails_sent(database_url: str, resend: FakeProviderClient) -> dict[str, int]:
    """Run the worker until the outbox is drained; the deliveries per key at the provider."""
    settings = load_settings(
        {"DATABASE_URL": database_url, "RESEND_API_KEY": RESEND_KEY, "RESEND_API_URL": resend.url}
    )
    provider = provider_from_settings(settings, concurrency=2)
    try:
        run_worker(settings, provider, concurrency=2)
    finally:
        provider.close()
    by_key: dict[str, int] = resend.stats()["deliveries_by_key"]
    return by_key


def thin_row(db: DB, event_id: str) -> Row:
    found = db.execute("SELECT * FROM stripe_thin_events WHERE event_id = %s", (event_id,))
    row = found.fetchone()
    assert row is not None
    return row


def event_row(db: DB, event_id: str) -> Row:
    row = db.execute("SELECT * FROM stripe_events WHERE event_id = %s", (event_id,)).fetchone()
    assert row is not None
    return row


# --- done when ---------------------------------------------------------------------------


def test_a_thin_event_gives_one_email(
    web: FlaskClient, stripe_api: FakeStripeClient, resend: FakeProviderClient,
    db: DB, database_url: str,
) -> None:  # fmt: skip
    """v1.invoice.paid -> the invoice fetched -> one pending row -> one email; a
    redelivery of the notification answers from the database without calling the API."""
    invoice = paid_invoice(stripe_api)
    notification = objects.thin_notification(invoice["id"])
    response = deliver(web, notification)
    key = f"platform/test/{invoice['id']}/invoice-paid"
    assert response.status_code == 200, response.json
    assert response.json == {"received": True, "outcome": "queued", "message_key": key}
    stored = thin_row(db, notification["id"])
    assert stored["status"] == "resolved" and stored["fetch_attempts"] == 1
    assert stored["notification"] == notification
    recorded = event_row(db, notification["id"])
    assert (recorded["event_type"], recorded["outcome"]) == ("v1.invoice.paid", "queued")
    calls = len(stripe_api.requests())
    again = deliver(web, notification)
    assert again.status_code == 200 and again.json["outcome"] == "queued"
    assert len(stripe_api.requests()) == calls
    assert thin_row(db, notification["id"])["deliveries"] == 2
    assert emails_sent(database_url, resend) == {key: 1}


@pytest.mark.parametrize(
    "thin_first", [True, False], ids=["thin-then-snapshot", "snapshot-then-thin"]
)
def test_thin_and_snapshot_of_one_invoice_give_one_email(
    thin_first: bool, web: FlaskClient, stripe_api: FakeStripeClient,
    resend: FakeProviderClient, db: DB, database_url: str,
) -> None:  # fmt: skip
    """An account sending both formats during a migration: one key, one row, one email;
    the later one is a duplicate (same fingerprint), never a conflict."""
    invoice = paid_invoice(stripe_api)
    snapshot = stripe_events.event(invoice)
    notification = objects.thin_notification(invoice["id"], snapshot_event=snapshot["id"])
    first, second = (notification, snapshot) if thin_first else (snapshot, notification)
    assert deliver(web, first).json["outcome"] == "queued"
    later = deliver(web, second)
    assert later.status_code == 200 and later.json["outcome"] == "duplicate"
    key = f"platform/test/{invoice['id']}/invoice-paid"
    assert db.execute("SELECT count(*) AS n FROM email_outbox").fetchone() == {"n": 1}
    assert emails_sent(database_url, resend) == {key: 1}


def test_a_connect_thin_event_is_fetched_with_the_accounts_context(
    web: FlaskClient, stripe_api: FakeStripeClient, db: DB
) -> None:
    """context = acct_…: the invoice and every look-up go out with Stripe-Context, and the
    key is the account's, as a Connect snapshot event would give."""
    invoice = paid_invoice(stripe_api, "acct_1Conn")
    response = deliver(web, objects.thin_notification(invoice["id"], context="acct_1Conn"))
    assert response.status_code == 200, response.json
    assert response.json["message_key"] == f"acct_1Conn/test/{invoice['id']}/invoice-paid"
    calls = stripe_api.requests()
    assert calls[0]["path"] == f"/v1/invoices/{invoice['id']}"
    assert {call["stripe_context"] for call in calls} == {"acct_1Conn"}
    snapshot = stripe_events.event(invoice, account="acct_1Conn")
    assert deliver(web, snapshot).json["outcome"] == "duplicate"


def test_the_api_down_for_the_first_fetches_still_ends_in_one_email(
    web: FlaskClient, stripe_api: FakeStripeClient, resend: FakeProviderClient,
    db: DB, database_url: str,
) -> None:  # fmt: skip
    """While the API answers 5xx or 429 the notification is stored, stays pending and
    Stripe gets 503, so it redelivers; the first redelivery after the API is back queues
    the receipt, and later ones change nothing."""
    invoice = paid_invoice(stripe_api)
    notification = objects.thin_notification(invoice["id"])
    path = f"/v1/invoices/{invoice['id']}"
    stripe_api.script({"status": 500, "path": path}, {"status": 503, "path": path},
                      {"status": 429, "path": path, "headers": {"Retry-After": "30"}})  # fmt: skip
    for _ in range(3):
        response = deliver(web, notification)
        assert response.status_code == 503
        assert "stored" in response.json["error"]
    pending = thin_row(db, notification["id"])
    assert pending["status"] == "pending" and pending["fetch_attempts"] == 3
    assert "HTTP 429" in pending["last_error"]
    assert db.execute("SELECT count(*) AS n FROM email_outbox").fetchone() == {"n": 0}
    assert deliver(web, notification).json["outcome"] == "queued"
    assert deliver(web, notification).json["outcome"] == "queued"
    assert emails_sent(database_url, resend) == {f"platform/test/{invoice['id']}/invoice-paid": 1}


def test_backfill_resolves_what_stripe_stopped_redelivering(
    web: FlaskClient, stripe_api: FakeStripeClient, resend: FakeProviderClient,
    thin_environ: dict[str, str], db: DB, database_url: str, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """An outage longer than Stripe's retries: `receipts backfill` fetches the stored
    notification's invoice; a very late redelivery still adds nothing. One email."""
    invoice = paid_invoice(stripe_api)
    notification = objects.thin_notification(invoice["id"])
    stripe_api.script({"status": 500, "path": "/v1/invoices/"})
    assert deliver(web, notification).status_code == 503
    db.execute("UPDATE stripe_thin_events SET first_received_at = now() - interval '4 days'")
    assert (
        main(["backfill", "--since", "72h"], {**thin_environ, "EMAIL_FROM": "b@example.com"}) == 0
    )
    assert "pending thin notifications: queued 1" in capsys.readouterr().out
    assert thin_row(db, notification["id"])["status"] == "resolved"
    assert deliver(web, notification).json["outcome"] == "queued"
    assert emails_sent(database_url, resend) == {f"platform/test/{invoice['id']}/invoice-paid": 1}


# --- ignored, refused, rejected ----------------------------------------------------------


def test_an_invoice_that_is_not_paid_is_recorded_as_ignored(
    web: FlaskClient, stripe_api: FakeStripeClient, db: DB
) -> None:
    """The fetched invoice is open: 200, no row, the event says why."""
    invoice = paid_invoice(stripe_api, status="open")
    notification = objects.thin_notification(invoice["id"])
    response = deliver(web, notification)
    assert response.status_code == 200 and response.json["outcome"] == "ignored"
    recorded = event_row(db, notification["id"])
    assert (recorded["outcome"], recorded["detail"]) == ("ignored", "invoice_not_paid")
    assert thin_row(db, notification["id"])["status"] == "resolved"
    assert db.execute("SELECT count(*) AS n FROM email_outbox").fetchone() == {"n": 0}


def test_an_invoice_in_another_account_is_recorded_as_ignored(
    web: FlaskClient, stripe_api: FakeStripeClient, db: DB
) -> None:
    """The context names an account the invoice is not in (404 resource_missing)."""
    invoice = paid_invoice(stripe_api, "acct_1Other")
    notification = objects.thin_notification(invoice["id"], context="acct_1Conn")
    assert deliver(web, notification).json["outcome"] == "ignored"
    assert event_row(db, notification["id"])["detail"] == "invoice_not_in_account"


def test_a_livemode_mismatch_is_recorded_as_ignored(
    web: FlaskClient, stripe_api: FakeStripeClient, db: DB
) -> None:
    """A live notification naming a test invoice is not a live receipt."""
    invoice = paid_invoice(stripe_api)
    notification = objects.thin_notification(invoice["id"], livemode=True)
    assert deliver(web, notification).json["outcome"] == "ignored"
    assert event_row(db, notification["id"])["detail"] == "livemode_mismatch"


def test_other_thin_types_are_recorded_as_ignored_without_a_fetch(
    web: FlaskClient, stripe_api: FakeStripeClient, db: DB
) -> None:
    """v1.invoice.created: recorded as ignored, no API call, nothing pending."""
    notification = objects.thin_notification("in_1Created", event_type="v1.invoice.created")
    assert deliver(web, notification).json["outcome"] == "ignored"
    assert event_row(db, notification["id"])["detail"] == "event_type_not_handled"
    assert stripe_api.requests() == []
    assert db.execute("SELECT count(*) AS n FROM stripe_thin_events").fetchone() == {"n": 0}


def test_a_refused_key_keeps_the_notification_pending(
    environ: dict[str, str], stripe_api: FakeStripeClient, db: DB
) -> None:
    """401 from the API: 503 to Stripe (it retries), the reason kept on the stored row."""
    app = create_app(load_settings({**environ, "STRIPE_API_KEY": "rk_test_revoked",
                                    "STRIPE_API_BASE": stripe_api.url}))  # fmt: skip
    try:
        notification = objects.thin_notification("in_1Refused")
        response = deliver(app.test_client(), notification)
    finally:
        app.extensions["receipts"].database.close()
    assert response.status_code == 503
    assert "401" in thin_row(db, notification["id"])["last_error"]


def test_without_an_api_key_a_thin_event_is_stored_and_answered_503(
    client: FlaskClient, db: DB
) -> None:
    """No STRIPE_API_KEY: the notification is kept and Stripe told to retry, with the reason;
    snapshot events work exactly as before."""
    notification = objects.thin_notification("in_1NoKey")
    response = deliver(client, notification)
    assert response.status_code == 503 and "STRIPE_API_KEY" in response.json["error"]
    assert thin_row(db, notification["id"])["status"] == "pending"
    snapshot = stripe_events.event(stripe_events.invoice(id="in_1NoKeySnap"))
    assert deliver(client, snapshot).json["outcome"] == "queued"


def test_a_badly_signed_or_malformed_notification_stores_nothing(
    web: FlaskClient, stripe_api: FakeStripeClient, db: DB
) -> None:
    """Same secrets, same 400s: nothing stored, no API call."""
    notification = objects.thin_notification("in_1Bad")
    data, headers = objects.signed(notification, "whsec_someone_else")
    assert web.post("/webhooks/stripe", data=data, headers=headers).status_code == 400
    for broken in (
        {k: v for k, v in notification.items() if k != "related_object"},
        notification | {"related_object": {"id": "cus_1", "type": "customer", "url": "/v1/x"}},
        notification | {"context": "org_1Nope"},
        notification | {"livemode": "no"},
        notification
        | {"reason": {"type": "request", "request": {"id": "r\u0000", "idempotency_key": None}}},
    ):
        assert deliver(web, broken).status_code == 400
    assert db.execute("SELECT count(*) AS n FROM stripe_thin_events").fetchone() == {"n": 0}
    assert stripe_api.requests() == []


def test_a_snapshot_mentioning_the_thin_object_is_still_a_snapshot(
    web: FlaskClient, stripe_api: FakeStripeClient
) -> None:
    """Only a body whose object is v2.core.event takes the thin path."""
    invoice = paid_invoice(stripe_api)
    invoice["metadata"] = {"note": '"v2.core.event"'}
    assert deliver(web, stripe_events.event(invoice)).json["outcome"] == "queued"


# --- facts from the API --------------------------------------------------------------------


def test_a_snapshot_without_email_takes_the_customers_and_lookups_are_counted(
    web: FlaskClient, stripe_api: FakeStripeClient, db: DB
) -> None:
    """With a key, a snapshot with no customer_email is sent to the customer's current
    email; a failed look-up is counted in /metrics and ingest goes on."""
    invoice = paid_invoice(stripe_api, email=None)
    response = deliver(web, stripe_events.event(invoice))
    assert response.json["outcome"] == "queued"
    stored = db.execute("SELECT customer_email FROM email_outbox").fetchone()
    assert stored is not None and stored["customer_email"] == "jenny.rosen@example.com"
    other = paid_invoice(stripe_api)
    stripe_api.script({"status": 500, "path": "/v1/invoice_payments"})
    assert deliver(web, stripe_events.event(other)).json["outcome"] == "queued"
    metrics = web.get("/metrics", headers=METRICS_AUTH).get_data(as_text=True)
    assert 'receipts_stripe_api_lookups_total{lookup="payment_method",outcome="failed"}' in metrics
    assert "receipts_thin_events_pending 0.0" in metrics


def test_no_email_anywhere_still_goes_to_review(
    web: FlaskClient, stripe_api: FakeStripeClient, db: DB
) -> None:
    """Neither the invoice nor the customer has an email: the review row stays."""
    invoice = objects.invoice(email=None, customer="cus_1NoMail")
    stripe_api.add(invoices=[invoice], customers=[objects.customer("cus_1NoMail", email=None)])
    response = deliver(web, objects.thin_notification(invoice["id"]))
    assert response.json["outcome"] == "review"
    row = db.execute("SELECT status, review_reason FROM email_outbox").fetchone()
    assert row == {"status": "review", "review_reason": "missing_customer_email"}


def test_waiting_notifications_show_in_status(
    client: FlaskClient, db: DB, environ: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`receipts status` counts notifications waiting for the API and, past the pending
    age limit, says a person is needed."""
    deliver(client, objects.thin_notification("in_1Waiting"))
    db.execute(
        "UPDATE stripe_thin_events SET first_received_at = now() - %s", (timedelta(hours=2),)
    )
    assert main(["status"], environ) == 1
    out = capsys.readouterr().out
    assert "thin events     1 waiting for the Stripe API" in out
    assert "NEEDS A PERSON: 1 thin event notification(s) wait" in out


# --- the look-up budget -------------------------------------------------------------------


@pytest.fixture
def clock() -> ManualClock:
    """The web process's clock, moved only by the slow fake API's requests."""
    return ManualClock()


@pytest.fixture
def slow_api(clock: ManualClock) -> Iterator[FakeStripeClient]:
    """A fake Stripe API whose latencies pass on ``clock``: no request waits."""
    with running_fake_stripe_api(API_KEY, clock=clock) as fake:
        yield fake


@pytest.fixture
def slow_environ(environ: dict[str, str], slow_api: FakeStripeClient) -> dict[str, str]:
    return {**environ, "STRIPE_API_KEY": API_KEY, "STRIPE_API_BASE": slow_api.url}


@pytest.fixture
def slow_web(slow_environ: dict[str, str], clock: ManualClock) -> Iterator[FlaskClient]:
    app = create_app(load_settings(slow_environ), clock=clock)
    yield app.test_client()
    app.extensions["receipts"].database.close()


def lines_stored(db: DB) -> list[int]:
    """How many lines of its invoice each outbox row's render input carries from the API."""
    rows = db.execute(
        "SELECT json_array_length(render_input -> 'api_facts' -> 'all_lines') AS n"
        " FROM email_outbox ORDER BY message_key"
    ).fetchall()
    return [row["n"] for row in rows]


def test_lines_past_the_budget_store_nothing_and_the_sweep_stores_every_line(
    slow_web: FlaskClient, slow_api: FakeStripeClient, resend: FakeProviderClient,
    slow_environ: dict[str, str], db: DB, database_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """250 lines, three pages, each taking half the webhook's look-up budget: the budget
    is spent after two pages, so the webhook answers 503 and stores no receipt (never
    one with the payload's 10 lines) but holds the event. `receipts backfill`, without
    the budget, stores the receipt with all 250 lines; Stripe's next delivery of the
    event finds it: 200, one row, one email listing lines the payload did not carry."""
    invoice = paid_invoice(slow_api, lines=250, shown_lines=10, amount=25000)
    lines_path = f"/v1/invoices/{invoice['id']}/lines"
    slow_api.latency(lines_path, IN_REQUEST_BUDGET_SECONDS / 2)
    event = stripe_events.event(invoice)
    late = deliver(slow_web, event)
    assert late.status_code == 503 and "stored" in late.json["error"], late.json
    assert len(slow_api.requests(lines_path)) == 2
    assert db.execute("SELECT count(*) AS n FROM email_outbox").fetchone() == {"n": 0}
    assert db.execute("SELECT count(*) AS n FROM stripe_events").fetchone() == {"n": 0}
    held = thin_row(db, event["id"])
    assert (held["status"], held["notification"]) == ("pending", event)
    db.execute("UPDATE stripe_thin_events SET first_received_at = now() - interval '2 minutes'")
    environ = {**slow_environ, "EMAIL_FROM": "b@example.com"}
    assert main(["backfill", "--since", "72h"], environ) == 0
    assert "pending thin notifications: queued 1" in capsys.readouterr().out
    assert lines_stored(db) == [250]
    assert thin_row(db, event["id"])["status"] == "resolved"
    again = deliver(slow_web, event)
    key = f"platform/test/{invoice['id']}/invoice-paid"
    assert again.status_code == 200, again.json
    assert again.json == {"received": True, "outcome": "queued", "message_key": key}
    assert db.execute("SELECT count(*) AS n FROM email_outbox").fetchone() == {"n": 1}
    assert emails_sent(database_url, resend) == {key: 1}
    assert "Seat 49" in resend.deliveries()[0]["body"]  # the payload's stop at Seat 9
