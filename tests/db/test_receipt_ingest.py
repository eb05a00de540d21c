"""Richer receipts through the real webhook, database and worker."""

from __future__ import annotations

import copy
from typing import Any

import psycopg
from flask.testing import FlaskClient

from receipts.config import Settings, load_settings
from tests.fake_provider import FakeProviderClient
from tests.receipt_examples import example
from tests.stripe_events import TEST_SECRET, encode, sign
from tests.worker_runs import API_KEY, work

Row = dict[str, Any]


def post(client: FlaskClient, event: dict[str, Any]) -> Any:
    body = encode(event)
    return client.post(
        "/webhooks/stripe",
        data=body,
        headers={"Stripe-Signature": sign(body, TEST_SECRET), "Content-Type": "application/json"},
    )


def send_all(database_url: str, fake: FakeProviderClient) -> None:
    settings: Settings = load_settings(
        {"DATABASE_URL": database_url, "RESEND_API_KEY": API_KEY, "RESEND_API_URL": fake.url}
    )
    work(settings, concurrency=1)


def test_reminted_links_are_one_row_one_email_and_a_duplicate(
    client: FlaskClient, db: psycopg.Connection[Row], database_url: str, fake: FakeProviderClient
) -> None:
    """Stripe re-signs the hosted and PDF links per rendering: a second event is no conflict."""
    first = example("invoice_paid_subscription_update")
    second = copy.deepcopy(first)
    second["id"] = "evt_1QExampleUpgradePaid02"
    invoice = second["data"]["object"]
    for field in ("hosted_invoice_url", "invoice_pdf"):
        invoice[field] = invoice[field].replace("test_", "test_Reminted") + "&t=1764555999"
    assert post(client, first).json["outcome"] == "queued"
    assert post(client, second).json["outcome"] == "duplicate"
    send_all(database_url, fake)
    [row] = db.execute("SELECT status, payload FROM email_outbox").fetchall()
    assert row["status"] == "sent"
    assert "Launch offer (20% off): -$19.60" in row["payload"]["text"]
    outcomes = db.execute("SELECT outcome FROM stripe_events ORDER BY first_received_at").fetchall()
    assert [event["outcome"] for event in outcomes] == ["queued", "duplicate"]
    assert fake.stats()["deliveries"] == 1


def test_an_absurd_amount_is_a_review_row_not_a_500(
    client: FlaskClient, db: psycopg.Connection[Row]
) -> None:
    """An amount Stripe cannot send, correctly signed: 200, a review row with its reason."""
    event = example("invoice_paid")
    event["data"]["object"]["total"] = 10**28
    response = post(client, event)
    assert response.status_code == 200 and response.json["outcome"] == "review"
    [row] = db.execute("SELECT status, review_reason FROM email_outbox").fetchall()
    assert (row["status"], row["review_reason"]) == ("review", "invalid_invoice_amounts")


def test_a_row_fingerprinted_by_an_earlier_release_is_a_duplicate_not_a_conflict(
    client: FlaskClient, db: psycopg.Connection[Row]
) -> None:
    """An upgrade must not page anyone: a redelivery of an event stored before it (whose
    row carries the earlier fingerprint, links included) is still a duplicate."""
    from receipts.receipt.fingerprints import legacy_fingerprint

    event = example("invoice_paid_subscription_update")
    assert post(client, event).json["outcome"] == "queued"
    invoice = event["data"]["object"]
    stored_before_upgrade = legacy_fingerprint(invoice["id"], invoice)
    db.execute("UPDATE email_outbox SET fingerprint = %s", (stored_before_upgrade,))
    event["id"] = "evt_1QExampleUpgradePaid03"
    assert post(client, event).json["outcome"] == "duplicate"
    db.execute("UPDATE email_outbox SET fingerprint = 'sha256:something-else'")
    event["id"] = "evt_1QExampleUpgradePaid04"
    assert post(client, event).json["outcome"] == "conflict"
