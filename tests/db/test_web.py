"""POST /webhooks/stripe against a real database: one row per paid invoice."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
import requests
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.serving import make_server

from receipts.config import load_settings
from receipts.web import create_app
from tests import stripe_events
from tests.stripe_events import TEST_SECRET, encode, sign

Row = dict[str, Any]


def post(
    client: FlaskClient, event: dict[str, Any], secret: str | list[str] = TEST_SECRET, **kw: Any
) -> Any:
    body = encode(event)
    return client.post(
        "/webhooks/stripe",
        data=body,
        headers={"Stripe-Signature": sign(body, secret, **kw), "Content-Type": "application/json"},
    )


def outbox(db: psycopg.Connection[Row]) -> list[Row]:
    return db.execute("SELECT * FROM email_outbox ORDER BY created_at").fetchall()


def events(db: psycopg.Connection[Row]) -> list[Row]:
    return db.execute("SELECT * FROM stripe_events ORDER BY first_received_at").fetchall()


def test_a_redelivery_says_so_in_the_answer(client: FlaskClient) -> None:
    """The answer to a second delivery of a stored event carries redelivery: true (what
    `receipts replay` prints as duplicate), with the event's first outcome."""
    event = stripe_events.event(stripe_events.invoice(id="in_1Again"))
    assert post(client, event).json["redelivery"] is False  # type: ignore[index]
    again = post(client, event).json
    assert again is not None and (again["outcome"], again["redelivery"]) == ("queued", True)


def test_signed_invoice_paid_stores_one_pending_row(client: FlaskClient, db: Any) -> None:
    """The acceptance case: platform/test/in_…/invoice-paid, status pending."""
    event = stripe_events.event(stripe_events.invoice(id="in_1Accept"))
    response = post(client, event)
    assert response.status_code == 200
    assert response.json == {
        "received": True,
        "outcome": "queued",
        "message_key": "platform/test/in_1Accept/invoice-paid",
        "redelivery": False,
    }
    [row] = outbox(db)
    assert row["message_key"] == "platform/test/in_1Accept/invoice-paid"
    assert row["status"] == "pending"
    assert row["attempts"] == 0 and row["first_attempt_at"] is None
    assert row["payload"]["to"] == ["jenny.rosen@example.com"]
    assert row["source_event_id"] == event["id"]
    [recorded] = events(db)
    assert recorded["outcome"] == "queued" and recorded["deliveries"] == 1


def test_redelivery_changes_nothing_but_the_delivery_count(client: FlaskClient, db: Any) -> None:
    event = stripe_events.event()
    for _ in range(3):
        assert post(client, event).status_code == 200
    [row] = outbox(db)
    [recorded] = events(db)
    assert recorded["deliveries"] == 3
    assert recorded["outcome"] == "queued"
    assert row["updated_at"] == row["created_at"]


def test_a_second_event_for_the_same_invoice_is_a_duplicate(client: FlaskClient, db: Any) -> None:
    """Stripe sends several events about one invoice; the key, not the event id, decides."""
    invoice = stripe_events.invoice()
    first, second = stripe_events.event(invoice), stripe_events.event(invoice)
    assert post(client, first).json["outcome"] == "queued"
    assert post(client, second).json["outcome"] == "duplicate"
    [row] = outbox(db)
    assert row["source_event_id"] == first["id"]
    assert [e["outcome"] for e in events(db)] == ["queued", "duplicate"]


def test_same_key_with_different_meaning_is_a_recorded_conflict(
    client: FlaskClient, db: Any
) -> None:
    """The original row is kept untouched; the conflict is recorded; Stripe gets 200."""
    invoice = stripe_events.invoice()
    post(client, stripe_events.event(invoice))
    before = outbox(db)
    changed = stripe_events.event({**invoice, "customer_email": "someone.else@example.com"})
    response = post(client, changed)
    assert response.status_code == 200 and response.json["outcome"] == "conflict"
    assert outbox(db) == before
    conflict = events(db)[-1]
    assert conflict["outcome"] == "conflict"
    assert conflict["message_key"] == before[0]["message_key"]
    assert conflict["fingerprint"] != before[0]["fingerprint"]


def test_test_live_and_connect_accounts_are_separate_rows(client: FlaskClient, db: Any) -> None:
    invoice = stripe_events.invoice(id="in_1Scope")
    for account in (None, "acct_1Conn"):
        for live in (False, True):
            post(client, stripe_events.event(invoice, account=account, livemode=live))
    assert sorted(r["message_key"] for r in outbox(db)) == [
        "acct_1Conn/live/in_1Scope/invoice-paid",
        "acct_1Conn/test/in_1Scope/invoice-paid",
        "platform/live/in_1Scope/invoice-paid",
        "platform/test/in_1Scope/invoice-paid",
    ]


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"customer_email": None}, "missing_customer_email"),
        ({"hosted_invoice_url": "https://example.com/i/1"}, "invalid_hosted_invoice_url"),
    ],
)
def test_unusable_paid_invoice_becomes_a_review_row(
    client: FlaskClient, db: Any, overrides: dict[str, Any], reason: str
) -> None:
    response = post(client, stripe_events.event(stripe_events.invoice(**overrides)))
    assert response.status_code == 200 and response.json["outcome"] == "review"
    [row] = outbox(db)
    assert row["status"] == "review" and row["review_reason"] == reason
    assert row["payload"] is None


def test_other_event_types_are_acknowledged_and_recorded_as_ignored(
    client: FlaskClient, db: Any
) -> None:
    response = post(
        client, stripe_events.event(type="customer.created", data_object={"id": "cus_1"})
    )
    assert response.status_code == 200 and response.json["outcome"] == "ignored"
    assert outbox(db) == []
    [recorded] = events(db)
    assert recorded["outcome"] == "ignored" and recorded["detail"] == "event_type_not_handled"


def test_zero_value_invoice_is_ignored(client: FlaskClient, db: Any) -> None:
    response = post(client, stripe_events.event(stripe_events.invoice(amount_paid=0)))
    assert response.json["outcome"] == "ignored"
    assert outbox(db) == []


def _signed_now(body: bytes) -> str:
    return sign(body, TEST_SECRET)


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (None, "missing Stripe-Signature header"),
        ("garbage", "malformed Stripe-Signature header"),
        (f"t={int(time.time())},v0=abc", "Stripe-Signature header has no v1 signature"),
        ("WRONG", "no signature matches a configured secret"),
        ("STALE", "signature timestamp outside the 300 s tolerance"),
    ],
)
def test_bad_signatures_are_refused_and_store_nothing(
    client: FlaskClient, db: Any, header: str | None, reason: str
) -> None:
    body = encode(stripe_events.event())
    if header == "WRONG":
        header = sign(body, "whsec_someone_else")
    elif header == "STALE":
        header = sign(body, TEST_SECRET, timestamp=int(time.time()) - 301)
    headers = {"Stripe-Signature": header} if header else {}
    response = client.post("/webhooks/stripe", data=body, headers=headers)
    assert response.status_code == 400
    assert response.json == {"error": reason}
    assert outbox(db) == [] and events(db) == []


def test_a_body_changed_after_signing_is_refused(client: FlaskClient, db: Any) -> None:
    body = encode(stripe_events.event())
    header = sign(body, TEST_SECRET)
    response = client.post(
        "/webhooks/stripe", data=body.replace(b"1999", b"1"), headers={"Stripe-Signature": header}
    )
    assert response.status_code == 400
    assert outbox(db) == []


def test_every_configured_secret_is_accepted(environ: dict[str, str], db: Any) -> None:
    """Rotation and several endpoints: any configured secret verifies."""
    environ["STRIPE_WEBHOOK_SECRET"] = "whsec_old_one, whsec_new_one"
    app = create_app(load_settings(environ))
    client = app.test_client()
    assert post(client, stripe_events.event(), secret="whsec_new_one").status_code == 200
    assert post(client, stripe_events.event(), secret="whsec_old_one").status_code == 200
    # Stripe signs with both secrets during a rolling period: several v1 values.
    both = post(client, stripe_events.event(), secret=["whsec_unknown", "whsec_new_one"])
    assert both.status_code == 200
    assert len(outbox(db)) == 3
    app.extensions["receipts"].database.close()


def test_oversized_bodies_are_refused_with_413(client: FlaskClient, db: Any) -> None:
    body = b"{" + b" " * (1024 * 1024 + 10) + b"}"
    response = client.post(
        "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
    )
    assert response.status_code == 413
    assert events(db) == []


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1, 2]", b'{"id": "evt_1"}', "caf\xe9".encode("latin-1")],
)
def test_signed_bytes_that_are_not_a_stripe_event_get_400(
    client: FlaskClient, db: Any, body: bytes
) -> None:
    response = client.post(
        "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
    )
    assert response.status_code == 400
    assert events(db) == []


def test_invoice_paid_without_an_invoice_id_gets_400(client: FlaskClient, db: Any) -> None:
    response = post(client, stripe_events.event({"object": "invoice", "status": "paid"}))
    assert response.status_code == 400
    assert "invoice id" in response.json["error"]
    assert events(db) == []


def test_database_down_answers_503_so_stripe_retries(environ: dict[str, str]) -> None:
    """The app starts without a database; webhooks answer 5xx and /readyz 503."""
    environ["DATABASE_URL"] = "postgresql://postgres@127.0.0.1:1/receipts"
    environ["RECEIPTS_DATABASE_TIMEOUT"] = "0.5"
    app = create_app(load_settings(environ))
    client = app.test_client()
    assert client.get("/healthz").status_code == 200
    response = post(client, stripe_events.event())
    assert response.status_code == 503
    ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.json["failing"] == "database"
    app.extensions["receipts"].database.close()


def test_readyz_answers_200_with_a_database(client: FlaskClient) -> None:
    assert client.get("/readyz").status_code == 200


@pytest.fixture
def live_server(app: Flask) -> Iterator[str]:
    """The app behind a real threaded HTTP server on loopback."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_fifty_concurrent_deliveries_of_one_event_make_one_row(live_server: str, db: Any) -> None:
    """Concurrent inserts race on the primary key; ON CONFLICT lets exactly one win."""
    body = encode(stripe_events.event())
    header = sign(body, TEST_SECRET)

    def deliver(_: int) -> int:
        return requests.post(
            f"{live_server}/webhooks/stripe",
            data=body,
            headers={"Stripe-Signature": header},
            timeout=30,
        ).status_code

    with ThreadPoolExecutor(max_workers=50) as pool:
        statuses = list(pool.map(deliver, range(50)))
    assert statuses == [200] * 50
    assert len(outbox(db)) == 1
    [recorded] = events(db)
    assert recorded["deliveries"] == 50


def test_concurrent_events_about_one_invoice_make_one_row(live_server: str, db: Any) -> None:
    invoice = stripe_events.invoice()
    bodies = [encode(stripe_events.event(invoice)) for _ in range(20)]

    def deliver(body: bytes) -> str:
        response = requests.post(
            f"{live_server}/webhooks/stripe",
            data=body,
            headers={"Stripe-Signature": sign(body, TEST_SECRET)},
            timeout=30,
        )
        return str(json.loads(response.content)["outcome"])

    with ThreadPoolExecutor(max_workers=20) as pool:
        outcomes = sorted(pool.map(deliver, bodies))
    assert outcomes == ["duplicate"] * 19 + ["queued"]
    assert len(outbox(db)) == 1
