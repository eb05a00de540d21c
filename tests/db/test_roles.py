"""sql/roles/least_privilege.sql: the web and worker roles can do their job and no more.

Besides the real code paths run as each role, every named statement of a
role's query file (``receipts/queries/<file>.sql``) is checked against that
role's grants, so a statement added without its grant fails here, not in
production.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit
from uuid import UUID

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from receipts import queries
from receipts.config import load_settings
from receipts.delivery.claims import AttemptResult, claim_ready, record_attempt
from receipts.ingest.delivery_events import DeliveryEvent, record_delivery_event
from receipts.web import create_app
from tests import stripe_events
from tests.outbox_states import Db, insert_row, row
from tests.stripe_events import TEST_SECRET, encode, sign

SCRIPT = Path(__file__).resolve().parents[2] / "sql" / "roles" / "least_privilege.sql"
_numbers = itertools.count(1)

# Each query file, and the group role (least_privilege.sql) that runs its statements.
ROLE_FILES = {"ingest": "receipts_web", "delivery": "receipts_worker"}

# One sample value per parameter name used in any role's query file: the
# statements are planned (or run) with these, so types must fit the columns.
SAMPLE_PARAMETERS: dict[str, Any] = {
    "key": "platform/test/in_1Sample/invoice-paid",
    "purpose": "invoice-paid",
    "account": "platform",
    "livemode": False,
    "invoice_id": "in_1Sample",
    "event_id": "evt_1Sample",
    "event_type": "invoice.paid",
    "fingerprint": "sha256:sample",
    "payload": Jsonb({"to": ["jenny.rosen@example.com"]}),
    "status": "pending",
    "review_reason": None,
    "new_outcome": "queued",
    "imported_prefix": "imported:",
    "detail": None,
    "outcome": "ignored",
    "channel": "receipts_outbox",
    "svix_id": "msg_sample",
    "email_id": "re_sample",
    "message_tag": "platform_test_in_1Sample_invoice-paid",
    "occurred_at": datetime(2026, 11, 30, 1, 0, tzinfo=UTC),
    "rank": 2,
    "ranks": Jsonb({"delayed": 1, "delivered": 2}),
    "limit": 10,
    "worker_id": "host:1:sample",
    "lease_seconds": 60.0,
    "max_attempts": 10,
    "cutoff_seconds": 82800.0,
    "keys": ["platform/test/in_1Sample/invoice-paid"],
    "tokens": [UUID("00000000-0000-4000-8000-000000000001")],
    "attempt_ids": [1],
    "statuses": ["sent"],
    "outcomes": ["sent"],
    "provider_ids": ["re_sample"],
    "reasons": [None],
    "delays": [0.0],
    "refunds": [0],
    "last_errors": [None],
    "http_statuses": [200],
    "provider_errors": [None],
    "provider": "resend",
    "pause_seconds": 3600.0,
    "reason": "daily_quota_exceeded",
    "email_created_at": datetime(2026, 11, 30, 0, 59, tzinfo=UTC),
    "invoice_ids": ["in_1Sample"],
    "tag": "platform_test_in_1Sample_invoice-paid",
}
_PARAMETER = re.compile(r"%\((\w+)\)s")
# Statements the planner can check without running them; others run for real.
_PLANNABLE = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "VALUES", "MERGE")


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


def test_web_role_records_failures_and_evidence(roles: dict[str, str], db: Db) -> None:
    """email.failed sets the status with its reason, and an email.sent whose tag names
    a receipt is stored as evidence for it, both as receipts_web."""
    sent = insert_row(db, "in_1WebFail", status="sent", provider_id="re_fail")
    waiting = insert_row(db, "in_1WebEvid", status="review", review_reason="attempts_exhausted")
    events = [
        DeliveryEvent(svix_id="msg_f", event_type="email.failed", email_id="re_fail",
                      occurred_at=None, detail="reached_daily_quota"),
        DeliveryEvent(svix_id="msg_e", event_type="email.sent", email_id="re_unrecorded",
                      occurred_at=None, message_tag=waiting.replace("/", "_")),
    ]  # fmt: skip
    with psycopg.connect(roles["receipts_web"], row_factory=dict_row) as conn, conn.transaction():
        outcomes = [record_delivery_event(conn, event) for event in events]
    assert outcomes == ["applied", "evidence"]
    assert (row(db, sent)["delivery_status"], row(db, sent)["delivery_detail"]) == (
        "failed",
        "reached_daily_quota",
    )


def test_worker_role_records_reads_and_lifts_the_sending_pause(
    roles: dict[str, str], db: Db
) -> None:
    """A quota answer's pause is written, read and cleared as receipts_worker."""
    from receipts.delivery.decisions import QuotaPause
    from receipts.delivery.sending_pause import clear_pause, current_pause, record_pause
    from receipts.vocabulary import PauseReason

    with psycopg.connect(roles["receipts_worker"], row_factory=dict_row) as conn:
        with conn.transaction():
            quota = QuotaPause(reason=PauseReason.DAILY_QUOTA, seconds=600)
            recorded = record_pause(conn, "resend", quota, "w-role")
        with conn.transaction():
            assert current_pause(conn, "resend") == replace(
                recorded,
                seconds_left=current_pause(conn, "resend").seconds_left,  # type: ignore[union-attr]
            )
        with conn.transaction():
            assert clear_pause(conn, "resend") is not None
    assert db.execute("SELECT count(*) AS n FROM sending_pauses").fetchone() == {"n": 0}


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


def _apply_grants(db: Db) -> None:
    db.execute(SCRIPT.read_text().encode())


def _first_keyword(statement: str) -> str:
    code = [line for line in statement.splitlines() if line and not line.startswith("--")]
    return code[0].split(None, 1)[0].upper()


def _sample_parameters(name: str, statement: str) -> dict[str, Any]:
    wanted = set(_PARAMETER.findall(statement))
    missing = wanted - SAMPLE_PARAMETERS.keys()
    assert not missing, f"{name}: add a sample value for {sorted(missing)} to SAMPLE_PARAMETERS"
    return {parameter: SAMPLE_PARAMETERS[parameter] for parameter in wanted}


def _run_as(conn: psycopg.Connection[Any], role: str, name: str, statement: str) -> Any:
    """EXPLAIN the statement (or run it) as ``role``, in a transaction rolled back after.

    EXPLAIN checks the privileges on every table and column the statement
    touches, as the executor would, without changing a row. A ClientCursor
    binds the parameters into the text, which EXPLAIN needs.
    """
    params = _sample_parameters(name, statement)
    plannable = _first_keyword(statement) in _PLANNABLE
    with conn.transaction(force_rollback=True):
        conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(role)))
        cursor = psycopg.ClientCursor(conn)
        if not plannable:
            cursor.execute(statement, params)
            return None
        cursor.execute("EXPLAIN (FORMAT JSON) " + statement, params)
        row = cursor.fetchone()
        assert row is not None
        return row[0]


def _refusals(database_url: str, query_file: str, role: str) -> dict[str, str]:
    """The statements of ``query_file`` that ``role`` cannot run, with the server's reason."""
    refused = {}
    with psycopg.connect(database_url) as conn:
        for name, statement in queries.load(query_file).items():
            try:
                _run_as(conn, role, name, statement)
            except psycopg.Error as exc:
                refused[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return refused


def _outbox_changes(plan: Any) -> set[str]:
    """How the plan modifies email_outbox rows: Update, Delete, Merge, or an
    insert whose ON CONFLICT updates (plain inserts create rows, never change them)."""
    found = set()
    nodes = [plan] if isinstance(plan, dict) else list(plan)
    while nodes:
        node = nodes.pop()
        if isinstance(node, dict):
            if node.get("Node Type") == "ModifyTable" and node.get("Relation Name") == (
                "email_outbox"
            ):
                operation = node.get("Operation")
                if operation == "Insert" and node.get("Conflict Resolution") == "UPDATE":
                    operation = "Insert ... ON CONFLICT DO UPDATE"
                if operation != "Insert":
                    found.add(operation)
            nodes.extend(node.values())
        elif isinstance(node, list):
            nodes.extend(node)
    return found


@pytest.mark.parametrize(("query_file", "role"), ROLE_FILES.items())
def test_each_role_can_run_every_statement_of_its_query_file(
    query_file: str, role: str, database_url: str, db: Db
) -> None:
    """Every named statement of the role's query file passes the server's table and
    column privilege checks as that role: none needs a grant the role lacks."""
    _apply_grants(db)
    assert queries.load(query_file), f"{query_file}.sql holds no statement"
    assert _refusals(database_url, query_file, role) == {}


def test_the_statement_check_notices_a_missing_grant(database_url: str, db: Db) -> None:
    """The check above is not vacuous: with one column grant taken back, the
    statements that need it (and only those) are reported as refused."""
    _apply_grants(db)
    db.execute("REVOKE UPDATE (delivery_status) ON email_outbox FROM receipts_web")
    refused = _refusals(database_url, "ingest", "receipts_web")
    assert list(refused) == ["set_delivery_status"]
    assert refused["set_delivery_status"].startswith("InsufficientPrivilege")


def test_ingest_statements_change_no_outbox_row_but_its_delivery_status(
    database_url: str, db: Db
) -> None:
    """Read from the query plans: of ingest.sql, only set_delivery_status updates
    email_outbox rows; nothing deletes one or updates it through ON CONFLICT."""
    _apply_grants(db)
    changes = {}
    with psycopg.connect(database_url) as conn:
        for name, statement in queries.load("ingest").items():
            plan = _run_as(conn, "receipts_web", name, statement)
            found = _outbox_changes(plan) if plan is not None else set()
            if found:
                changes[name] = found
    assert changes == {"set_delivery_status": {"Update"}}, json.dumps(
        {name: sorted(found) for name, found in changes.items()}
    )


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
