"""sql/roles/least_privilege.sql: the web and worker roles can do their job and no more."""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg.rows import dict_row

from receipts.config import load_settings
from receipts.delivery.claims import AttemptResult, claim_ready, record_attempt
from receipts.web import create_app
from receipts.web.resend_webhooks import DeliveryEvent, record_delivery_event
from tests import stripe_events
from tests.outbox_states import Db, insert_row, row
from tests.stripe_events import TEST_SECRET, encode, sign

SCRIPT = Path(__file__).resolve().parents[2] / "sql" / "roles" / "least_privilege.sql"
_numbers = itertools.count(1)


def as_role(url: str, role: str, password: str) -> str:
    """The same database URL, logging in as another role."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}:{password}@{host}"))


@pytest.fixture
def roles(database_url: str, db: Db) -> Iterator[dict[str, str]]:
    """The script applied (twice: it is idempotent) and one login role per group role,
    named uniquely for this run because roles are cluster-wide."""
    script = SCRIPT.read_text()
    db.execute(script.encode())
    db.execute(script.encode())
    password = uuid.uuid4().hex
    logins = {}
    for group in ("receipts_web", "receipts_worker"):
        login = f"{group}_t{os.getpid()}_{next(_numbers)}"
        db.execute(f"CREATE ROLE \"{login}\" LOGIN PASSWORD '{password}' IN ROLE {group}")
        logins[group] = login
    try:
        yield {group: as_role(database_url, login, password) for group, login in logins.items()}
    finally:
        for login in logins.values():
            db.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (login,),
            )
            db.execute(f'DROP ROLE IF EXISTS "{login}"')


def refused(url: str, statement: str, params: tuple[Any, ...] = ()) -> bool:
    """True when PostgreSQL refuses the statement for lack of privilege."""
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            conn.execute(statement.encode(), params)
        except psycopg.errors.InsufficientPrivilege:
            return True
    return False


def test_web_role_ingests_a_webhook_but_cannot_change_or_delete_rows(
    roles: dict[str, str], environ: dict[str, str], db: Db
) -> None:
    """The real ingest path runs as receipts_web (event, row, redelivery count, metrics);
    UPDATE of status or payload, DELETE, and reading the frozen email are refused."""
    web_url = roles["receipts_web"]
    app = create_app(load_settings({**environ, "DATABASE_URL": web_url}))
    try:
        client = app.test_client()
        event = stripe_events.event(stripe_events.invoice(id="in_1LeastPriv"))
        body = encode(event)
        for _ in range(2):
            response = client.post(
                "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
            )
            assert response.status_code == 200, response.json
        metrics = client.get("/metrics").get_data(as_text=True)
    finally:
        app.extensions["receipts"].database.close()
    key = "platform/test/in_1LeastPriv/invoice-paid"
    assert row(db, key)["status"] == "pending"
    recorded = db.execute("SELECT deliveries FROM stripe_events").fetchone()
    assert recorded is not None and recorded["deliveries"] == 2
    assert "receipts_database_up 1.0" in metrics

    assert refused(
        web_url, "UPDATE email_outbox SET status = 'sent' WHERE message_key = %s", (key,)
    )
    assert refused(web_url, "UPDATE email_outbox SET payload = '{}' WHERE message_key = %s", (key,))
    assert refused(web_url, "DELETE FROM email_outbox WHERE message_key = %s", (key,))
    assert refused(web_url, "SELECT payload FROM email_outbox")
    assert refused(web_url, "DELETE FROM stripe_events")
    assert refused(web_url, "INSERT INTO email_attempts (message_key, attempt, worker_id, "
                   "lease_token) VALUES (%s, 1, 'x', gen_random_uuid())", (key,))  # fmt: skip
    assert row(db, key)["status"] == "pending"


def test_web_role_records_delivery_events(roles: dict[str, str], db: Db) -> None:
    """A Resend delivery event is stored and sets delivery_status as receipts_web."""
    key = insert_row(db, "in_1WebDeliv", status="sent", provider_id="re_web")
    with psycopg.connect(roles["receipts_web"], row_factory=dict_row) as conn, conn.transaction():
        outcome = record_delivery_event(
            conn,
            DeliveryEvent(
                svix_id="msg_web", event_type="email.delivered", email_id="re_web", occurred_at=None
            ),
        )
    assert outcome == "applied" and row(db, key)["delivery_status"] == "delivered"


def test_worker_role_claims_and_records_but_cannot_create_or_delete(
    roles: dict[str, str], db: Db
) -> None:
    """claim_ready and record_attempt run as receipts_worker; inserting or deleting
    outbox rows and reading Stripe events are refused."""
    key = insert_row(db, "in_1Worker")
    worker_url = roles["receipts_worker"]
    with psycopg.connect(worker_url, row_factory=dict_row) as conn:
        with conn.transaction():
            claim = claim_ready(
                conn, limit=5, worker_id="w-role", lease_seconds=60, max_attempts=10,
                retry_cutoff_hours=23,
            )  # fmt: skip
        [claimed] = claim.rows
        with conn.transaction():
            held = record_attempt(
                conn,
                claimed,
                AttemptResult(status="sent", outcome="sent", http_status=200, provider_id="re_w"),
            )
    assert held and row(db, key)["status"] == "sent"
    assert refused(worker_url, "DELETE FROM email_outbox")
    assert refused(
        worker_url,
        "INSERT INTO email_outbox (message_key, purpose, account, livemode, invoice_id, "
        "source_event_id, fingerprint, status) "
        "VALUES ('k', 'p', 'a', false, 'i', 'e', 'f', 'sent')",
    )
    assert refused(worker_url, "SELECT * FROM stripe_events")
    assert refused(worker_url, "SELECT * FROM operator_actions")


def test_web_role_stores_and_resolves_a_thin_event(
    roles: dict[str, str], environ: dict[str, str], db: Db
) -> None:
    """A thin notification runs as receipts_web: stored, its invoice fetched from the fake
    Stripe API, the receipt queued, the notification resolved, /metrics read; it still
    cannot change or delete the notification's record."""
    from tests import stripe_objects
    from tests.fake_stripe_api import running_fake_stripe_api

    with running_fake_stripe_api("rk_test_roles") as stripe_api:
        invoice = stripe_objects.invoice()
        stripe_api.add(invoices=[invoice], customers=[stripe_objects.customer()])
        settings = load_settings(
            {**environ, "DATABASE_URL": roles["receipts_web"], "STRIPE_API_KEY": "rk_test_roles",
             "STRIPE_API_BASE": stripe_api.url}
        )  # fmt: skip
        app = create_app(settings)
        try:
            client = app.test_client()
            notification = stripe_objects.thin_notification(invoice["id"])
            data, headers = stripe_objects.signed(notification, TEST_SECRET)
            for _ in range(2):
                response = client.post("/webhooks/stripe", data=data, headers=headers)
                assert response.status_code == 200, response.json
            metrics = client.get("/metrics").get_data(as_text=True)
        finally:
            app.extensions["receipts"].database.close()
    assert row(db, f"platform/test/{invoice['id']}/invoice-paid")["status"] == "pending"
    stored = db.execute("SELECT status, deliveries FROM stripe_thin_events").fetchone()
    assert stored == {"status": "resolved", "deliveries": 2}
    assert "receipts_thin_events_pending 0.0" in metrics
    web_url = roles["receipts_web"]
    assert refused(web_url, "DELETE FROM stripe_thin_events")
    assert refused(web_url, "UPDATE stripe_thin_events SET notification = '{}'")
    assert refused(web_url, "DELETE FROM reconcile_runs")
