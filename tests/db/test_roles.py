"""sql/roles/least_privilege.sql: the web, worker and operator roles can do their job and no more.

Besides the real code paths run as each role, every named statement of a
role's query file (``receipts/queries/<file>.sql``) is checked against that
role's grants, so a statement added without its grant fails here, not in
production; and each abuse a role's credentials would allow without the
script (a `sent` row from the web role, a rewritten recipient or attempt
from the worker) is tried and must be refused.

The script is applied with psql, as the README says, under a role prefix of
this test session's own (roles are cluster-wide), once per test process to a
template every test database here is cut from.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit
from uuid import UUID

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Json, Jsonb

from receipts import queries
from receipts.cli import main
from receipts.config import Settings, load_settings
from receipts.delivery.claims import claim_ready, record_attempt
from receipts.delivery.decisions import AttemptResult
from receipts.ingest.delivery_events import DeliveryEvent, record_delivery_event
from receipts.message_keys import provider_tag
from receipts.operations import privileges
from receipts.vocabulary import AttemptOutcome, RowStatus
from receipts.web import create_app
from tests import stripe_events
from tests.console_client import console_app, console_environ, csrf_of, ingest, log_in
from tests.databases import DatabasePool, Prepared
from tests.fake_provider import FakeProviderClient
from tests.helpers import METRICS_AUTH
from tests.least_privilege import apply_roles, drop_group_roles, logins, session_prefix
from tests.outbox_states import Db, insert_attempt, insert_pending, insert_row, row
from tests.stripe_events import TEST_SECRET, encode, sign
from tests.worker_runs import work

# Each query file, and the group (least_privilege.sql: <prefix>_<group>) that runs it.
ROLE_FILES = {"ingest": "web", "delivery": "worker"}

# One sample value per parameter name used in any role's query file: the
# statements are planned (or run) with these, so types must fit the columns.
# The tables claim_ready reads or writes (email_batches: it skips members of live batches).
CLAIM_TABLES = ("email_outbox", "email_attempts", "email_batches")
SAMPLE_PARAMETERS: dict[str, Any] = {
    "key": "platform/test/in_1Sample/invoice-paid",
    "purpose": "invoice-paid",
    "account": "platform",
    "livemode": False,
    "invoice_id": "in_1Sample",
    "event_id": "evt_1Sample",
    "event_type": "invoice.paid",
    "fingerprint": "v2:sha256:sample",
    "legacy_fingerprint": "sha256:sample",
    "payload": Jsonb({"to": ["jenny.rosen@example.com"]}),
    "render_input": None,
    "copy_key": "platform/test/in_1Sample/invoice-paid-copy",
    "copy_purpose": "invoice-paid-copy",
    "copy_fingerprint": "v2:sha256:copy",
    "copy_render_input": None,
    "copy_to": "books@example.com",
    "refund_ids": ["re_1Sample"],
    "rendered": Jsonb(
        [
            {
                "message_key": "platform/test/in_1Sample/invoice-paid",
                "lease_token": "00000000-0000-4000-8000-000000000001",
                "payload": {"to": ["jenny.rosen@example.com"]},
            }
        ]
    ),
    "errors": ["TypeError"],
    "batches": Jsonb(
        [
            {
                "batch_key": "batch/00000000-0000-4000-8000-000000000002",
                "provider": "resend",
                "size": 1,
                "body_sha256": "0" * 64,
                "worker_id": "host:1:sample",
            }
        ]
    ),
    "members": Jsonb(
        [
            {
                "batch_key": "batch/00000000-0000-4000-8000-000000000002",
                "position": 0,
                "message_key": "platform/test/in_1Sample/invoice-paid",
                "lease_token": "00000000-0000-4000-8000-000000000001",
            }
        ]
    ),
    "batch_keys": ["batch/00000000-0000-4000-8000-000000000002"],
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
    "look_up_past_limit": True,
    "lookup_attempts": 3,
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
    "provider_messages": [None],
    "invoice_number": "ACME-0102",
    "customer_email": "jenny.rosen@example.com",
    "amount": 1999,
    "currency": "usd",
    "provider": "resend",
    "pause_seconds": 3600.0,
    "spacing": 1.75,
    "max_wait": 10.0,
    "team_limit": 5.0,
    "reason": "daily_quota_exceeded",
    "email_created_at": datetime(2026, 11, 30, 0, 59, tzinfo=UTC),
    "invoice_ids": ["in_1Sample"],
    "tag": "platform_test_in_1Sample_invoice-paid",
}
_PARAMETER = re.compile(r"%\((\w+)\)s")
# Statements the planner can check without running them; others run for real.
_PLANNABLE = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "VALUES", "MERGE")


@pytest.fixture(scope="session")
def prefix(server_url: str, database_pool: DatabasePool) -> Iterator[str]:
    """This session's role prefix; its group roles are dropped at the end, once no
    database of this process holds grants to them."""
    name = session_prefix()
    yield name
    database_pool.forget(_granted(name).name)
    drop_group_roles(server_url, name)


def _granted(prefix: str) -> Prepared:
    return Prepared(f"granted_{prefix}", lambda url: apply_roles(url, prefix))


@pytest.fixture
def direct_database_url(database_pool: DatabasePool, prefix: str) -> Iterator[str]:
    """The test's database with the role script applied: cut from a template the
    script was applied to once in this process, instead of applying it in each test."""
    with database_pool.migrated(_granted(prefix)) as url:
        yield url


def group(prefix: str, name: str) -> str:
    return f"{prefix}_{name}"


@pytest.fixture
def roles(database_url: str, prefix: str) -> Iterator[dict[str, str]]:
    """One login role per group of the applied script; yields
    {"web"|"worker"|"operator": URL logging in as it}."""
    with logins(database_url, prefix) as urls:
        yield urls


def refused(url: str, statement: str, params: tuple[Any, ...] = ()) -> bool:
    """True when PostgreSQL refuses the statement for lack of privilege, or for a
    row-level security policy (both are SQLSTATE 42501)."""
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            conn.execute(statement.encode(), params)
        except psycopg.errors.InsufficientPrivilege:
            return True
    return False


def changed_rows(url: str, statement: str, params: tuple[Any, ...] = ()) -> int:
    """How many rows the statement changed (row-level security filters silently)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(statement.encode(), params).rowcount


def test_web_role_ingests_a_webhook_but_cannot_change_or_delete_rows(
    roles: dict[str, str], environ: dict[str, str], db: Db
) -> None:
    """The real ingest path runs as <prefix>_web (event, row and its copy for the books,
    redelivery count, metrics);
    UPDATE of status or payload, DELETE, and reading the frozen email are refused."""
    web_url = roles["web"]
    copying = {"RECEIPTS_COPY_TO": "books@shop.example"}
    app = create_app(load_settings({**environ, "DATABASE_URL": web_url, **copying}))
    try:
        client = app.test_client()
        event = stripe_events.event(stripe_events.invoice(id="in_1LeastPriv"))
        body = encode(event)
        for _ in range(2):
            response = client.post(
                "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
            )
            assert response.status_code == 200, response.json
        addressless = encode(
            stripe_events.event(stripe_events.invoice(id="in_1NoAddress", customer_email=None))
        )
        response = client.post(
            "/webhooks/stripe",
            data=addressless,
            headers={"Stripe-Signature": sign(addressless, TEST_SECRET)},
        )
        assert response.status_code == 200 and response.json is not None
        assert response.json["outcome"] == "review"
        metrics = client.get("/metrics", headers=METRICS_AUTH).get_data(as_text=True)
    finally:
        app.extensions["receipts"].database.close()
    key = "platform/test/in_1LeastPriv/invoice-paid"
    assert row(db, key)["status"] == "pending"
    # its copy for the books, inserted by the same statement, passes the same policy
    assert row(db, key + "-copy")["customer_email"] == "books@shop.example"
    # A receipt without an address keeps the invoice it would be rendered from.
    waiting = row(db, "platform/test/in_1NoAddress/invoice-paid")
    assert waiting["review_reason"] == "missing_customer_email" and waiting["payload"] is None
    assert waiting["render_input"]["invoice"]["id"] == "in_1NoAddress"
    recorded = db.execute(
        "SELECT deliveries FROM stripe_events WHERE message_key = %s", (key,)
    ).fetchone()
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
    """A Resend delivery event is stored and sets delivery_status as <prefix>_web."""
    key = insert_row(db, "in_1WebDeliv", status="sent", provider_id="re_web")
    with psycopg.connect(roles["web"], row_factory=dict_row) as conn, conn.transaction():
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
    with psycopg.connect(roles["web"], row_factory=dict_row) as conn, conn.transaction():
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

    with psycopg.connect(roles["worker"], row_factory=dict_row) as conn:
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
    """claim_ready and record_attempt run as <prefix>_worker; inserting or deleting
    outbox rows and reading Stripe events are refused."""
    key = insert_row(db, "in_1Worker")
    worker_url = roles["worker"]
    with psycopg.connect(worker_url, row_factory=dict_row) as conn:
        with conn.transaction():
            claim = claim_ready(
                conn, limit=5, worker_id="w-role", lease_seconds=60, max_attempts=10,
                retry_cutoff_hours=23, render=refuse_to_render,
            )  # fmt: skip
        [claimed] = claim.rows
        with conn.transaction():
            held = record_attempt(
                conn,
                claimed,
                AttemptResult(
                    status=RowStatus.SENT,
                    outcome=AttemptOutcome.SENT,
                    http_status=200,
                    provider_id="re_w",
                ),
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
    found: set[str] = set()
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
                    found.add(str(operation))
            nodes.extend(node.values())
        elif isinstance(node, list):
            nodes.extend(node)
    return found


@pytest.mark.parametrize(("query_file", "role"), ROLE_FILES.items())
def test_each_role_can_run_every_statement_of_its_query_file(
    query_file: str, role: str, database_url: str, prefix: str
) -> None:
    """Every named statement of the role's query file passes the server's table and
    column privilege checks as that role: none needs a grant the role lacks."""
    assert queries.load(query_file), f"{query_file}.sql holds no statement"
    assert _refusals(database_url, query_file, group(prefix, role)) == {}


def test_the_statement_check_notices_a_missing_grant(
    database_url: str, db: Db, prefix: str
) -> None:
    """The check above is not vacuous: with one column grant taken back, the
    statements that need it (and only those) are reported as refused."""
    db.execute(f'REVOKE UPDATE (delivery_status) ON email_outbox FROM "{prefix}_web"')
    refused = _refusals(database_url, "ingest", group(prefix, "web"))
    assert list(refused) == ["set_delivery_status"]
    assert refused["set_delivery_status"].startswith("InsufficientPrivilege")


def test_ingest_statements_change_no_outbox_row_but_its_delivery_status(
    database_url: str, prefix: str
) -> None:
    """Read from the query plans: of ingest.sql, only set_delivery_status updates
    email_outbox rows; nothing deletes one or updates it through ON CONFLICT."""
    changes = {}
    with psycopg.connect(database_url) as conn:
        for name, statement in queries.load("ingest").items():
            plan = _run_as(conn, group(prefix, "web"), name, statement)
            found = _outbox_changes(plan) if plan is not None else set()
            if found:
                changes[name] = found
    assert changes == {"set_delivery_status": {"Update"}}, json.dumps(
        {name: sorted(found) for name, found in changes.items()}
    )


def test_web_role_stores_and_resolves_a_thin_event(
    roles: dict[str, str], environ: dict[str, str], db: Db
) -> None:
    """A thin notification runs as <prefix>_web: stored, its invoice fetched from the fake
    Stripe API, the receipt queued, the notification resolved, /metrics read; it still
    cannot change or delete the notification's record."""
    from tests import stripe_objects
    from tests.fake_stripe_api import running_fake_stripe_api

    with running_fake_stripe_api("rk_test_roles") as stripe_api:
        invoice = stripe_objects.invoice()
        stripe_api.add(invoices=[invoice], customers=[stripe_objects.customer()])
        settings = load_settings(
            {**environ, "DATABASE_URL": roles["web"], "STRIPE_API_KEY": "rk_test_roles",
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
            metrics = client.get("/metrics", headers=METRICS_AUTH).get_data(as_text=True)
        finally:
            app.extensions["receipts"].database.close()
    assert row(db, f"platform/test/{invoice['id']}/invoice-paid")["status"] == "pending"
    stored = db.execute("SELECT status, deliveries FROM stripe_thin_events").fetchone()
    assert stored == {"status": "resolved", "deliveries": 2}
    assert "receipts_thin_events_pending 0.0" in metrics
    web_url = roles["web"]
    assert refused(web_url, "DELETE FROM stripe_thin_events")
    assert refused(web_url, "UPDATE stripe_thin_events SET notification = '{}'")
    assert refused(web_url, "DELETE FROM reconcile_runs")


# --- issue: roles that only do their job ------------------------------------------

_OUTBOX_COLUMNS = (
    "message_key, purpose, account, livemode, invoice_id, source_event_id, fingerprint, "
    "payload, status, review_reason, customer_email"
)


def _web_insert(url: str, **overrides: Any) -> bool:
    """Try to create an outbox row as the web role; True when refused."""
    key = overrides.pop("key", "platform/test/in_1Forged/invoice-paid")
    values: dict[str, Any] = {
        "message_key": key,
        "purpose": "invoice-paid",
        "account": "platform",
        "livemode": False,
        "invoice_id": "in_1Forged",
        "source_event_id": "evt_1Forged",
        "fingerprint": "sha256:forged",
        "render_input": Jsonb({"invoice": {"id": "in_1Forged"}}),
        "status": "pending",
        "review_reason": None,
        "customer_email": "jenny.rosen@example.com",
        **overrides,
    }
    columns = ", ".join(values)
    placeholders = ", ".join(["%s"] * len(values))
    return refused(
        url,
        f"INSERT INTO email_outbox ({columns}) VALUES ({placeholders})",
        tuple(values.values()),
    )


def test_web_role_creates_only_rows_as_ingest_makes_them(roles: dict[str, str], db: Db) -> None:
    """The web role may create a pending row with what its email is rendered from, or a
    review row without an email; a `sent` or `processing` row, a row with send facts,
    a row with an email (clean, or with 49 bcc and headers), a key that is not its own
    invoice's, or a dismissed review row are refused."""
    web = roles["web"]
    other = "platform/test/in_1Other/invoice-paid"
    assert _web_insert(web, status="sent")
    assert _web_insert(web, status="processing")
    assert _web_insert(web, provider_id="re_forged", sent_at=datetime.now(UTC))
    assert _web_insert(web, attempts=10)
    assert _web_insert(web, available_at=datetime(2099, 1, 1, tzinfo=UTC))
    assert _web_insert(web, customer_email=None)
    # No email of its own making, however well formed: only the worker renders one.
    tag = [{"name": "message_key", "value": "platform_test_in_1Forged_invoice-paid"}]
    assert _web_insert(web, payload=Jsonb({"to": ["jenny.rosen@example.com"], "tags": tag}))
    assert _web_insert(
        web,
        render_input=None,
        payload=Jsonb(
            {
                "from": "Security <security@merchant.example>",
                "to": ["jenny.rosen@example.com"],
                "bcc": [f"victim{n}@example.net" for n in range(49)],
                "cc": ["x@example.net"],
                "reply_to": "attacker@example.net",
                "headers": {"X-Phish": "1"},
                "tags": tag,
            }
        ),
    )
    assert _web_insert(web, key=other)  # the key of another invoice than the row's
    assert _web_insert(web, status="review", review_reason="dismissed")
    assert _web_insert(web, status="review", review_reason=None)
    assert db.execute("SELECT count(*) AS n FROM email_outbox").fetchone() == {"n": 0}
    # What ingest makes is accepted.
    assert not _web_insert(web)
    assert not _web_insert(
        web,
        key="platform/test/in_1Review/invoice-paid",
        invoice_id="in_1Review",
        status="review",
        review_reason="invalid_customer_email",
        customer_email="jenny@@example",
    )


def test_web_role_sets_delivery_status_only_on_sent_rows(roles: dict[str, str], db: Db) -> None:
    """Setting delivery_status on a pending or review row is refused; on a sent row it
    works; no other column of any row can be changed."""
    web = roles["web"]
    pending = insert_row(db, "in_1DsPending")
    waiting = insert_row(db, "in_1DsReview", status="review", review_reason="attempts_exhausted")
    sent = insert_row(db, "in_1DsSent", status="sent", provider_id="re_ds")
    for key in (pending, waiting):
        assert refused(
            web,
            "UPDATE email_outbox SET delivery_status = 'delivered' WHERE message_key = %s",
            (key,),
        )
        assert row(db, key)["delivery_status"] is None
    assert (
        changed_rows(
            web,
            "UPDATE email_outbox SET delivery_status = 'bounced' WHERE message_key = %s",
            (sent,),
        )
        == 1
    )
    assert refused(web, "UPDATE email_outbox SET sent_at = now() WHERE message_key = %s", (sent,))
    assert refused(
        web, "UPDATE email_outbox SET status = 'pending' WHERE message_key = %s", (sent,)
    )


def refuse_to_render(key: str, render_input: dict[str, Any]) -> dict[str, Any]:
    raise AssertionError(f"{key} has its email already")


def test_a_frozen_email_never_changes_whoever_asks(
    roles: dict[str, str], db: Db, database_url: str
) -> None:
    """Every send of a key carries the same bytes: the worker (which may fill in an
    email rendered at the first claim) and even the table's owner cannot change a
    stored one; clearing it (receipts prune) stays possible."""
    pending = insert_row(db, "in_1Frozen")
    for url in (roles["worker"], database_url):
        with (
            pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="cannot change"),
            psycopg.connect(url, autocommit=True) as conn,
        ):
            conn.execute(
                "UPDATE email_outbox SET payload = %s WHERE message_key = %s",
                (Jsonb({"to": ["jenny.rosen@example.com"], "subject": "other"}), pending),
            )
    db.execute("UPDATE email_outbox SET payload = NULL, status = 'sent', provider_id = 're_f' "
               "WHERE message_key = %s", (pending,))  # fmt: skip
    assert row(db, pending)["payload"] is None


def test_the_worker_fills_a_missing_email_only_for_the_rows_customer(
    roles: dict[str, str], db: Db
) -> None:
    """A row the webhook stored without its email gets one at its first claim; the
    worker role cannot make that email go to anyone but the row's customer_email, nor
    give it cc, bcc, headers, a tag other than its key's, or attachments other than the
    receipt's (or refund receipt's) one PDF (RECEIPTS_ATTACH_PDF)."""
    key, refund_key = insert_row(db, "in_1Unrendered"), insert_row(db, "in_1UnrenderedRefund")
    db.execute(
        "UPDATE email_outbox SET payload = NULL, render_input = '{}', "
        "customer_email = 'jenny.rosen@example.com' WHERE message_key IN (%s, %s)",
        (key, refund_key),
    )
    tag = [{"name": "message_key", "value": provider_tag(key)}]
    email = {"from": "Shop <billing@shop.example>", "to": ["jenny.rosen@example.com"],
             "subject": "Receipt", "text": "…", "html": "<p>…</p>", "tags": tag}  # fmt: skip
    for forged in (
        {**email, "to": ["attacker@example.net"]},
        {**email, "bcc": [f"victim{n}@example.net" for n in range(49)]},
        {**email, "cc": ["x@example.net"]},
        {**email, "headers": {"X-Phish": "1"}},
        {**email, "tags": [*tag, {"name": "campaign", "value": "phish"}]},
        {**email, "tags": [{"name": "message_key", "value": "platform_test_in_1Other_x"}]},
        *({**email, "attachments": forged} for forged in forged_attachments()),
    ):
        assert refused(
            roles["worker"],
            "UPDATE email_outbox SET payload = %s WHERE message_key = %s",
            (Jsonb(forged), key),
        ), forged
    assert (
        changed_rows(
            roles["worker"],
            "UPDATE email_outbox SET payload = %s, render_input = NULL WHERE message_key = %s",
            (Jsonb({**email, "reply_to": "help@shop.example", "attachments": [PDF]}), key),
        )
        == 1
    )
    refund_pdf = {**PDF, "filename": "refund-SAMPLE-0001.pdf"}
    refund_tag = [{"name": "message_key", "value": provider_tag(refund_key)}]
    refund_email = {**email, "tags": refund_tag, "attachments": [refund_pdf]}
    assert (
        changed_rows(
            roles["worker"],
            "UPDATE email_outbox SET payload = %s, render_input = NULL WHERE message_key = %s",
            (Jsonb(refund_email), refund_key),
        )
        == 1
    )


PDF = {
    "filename": "receipt-SAMPLE-0001.pdf",
    "content": "JVBERi0xLjQK",
    "content_type": "application/pdf",
}


def forged_attachments() -> list[object]:
    """Attachments the worker role cannot put in an email: not one PDF of bounded size."""
    return [
        [PDF, PDF],
        [],
        PDF,
        [{**PDF, "filename": "invoice.exe"}],
        [{**PDF, "filename": "receipt-../../x.pdf"}],
        [{**PDF, "filename": "refund-../../x.pdf"}],
        [{**PDF, "filename": "credit-note-SAMPLE-0001.pdf"}],
        [{**PDF, "content_type": "text/html"}],
        [{**PDF, "path": "https://attacker.example/malware.pdf"}],
        [{key: value for key, value in PDF.items() if key != "content"}],
        [{**PDF, "content": "<script>"}],
        [{**PDF, "content": "A" * (2 * 1024 * 1024 + 4)}],
    ]


def test_worker_role_sends_and_resends_a_batch(
    roles: dict[str, str], db: Db, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """RECEIPTS_BATCH_SIZE as <prefix>_worker: the batch is stored, retried after a 5xx
    with its stored body, and finished when its rows are sent."""
    keys = insert_pending(db, 3)
    settings = replace(worker_settings, database_url=roles["worker"], batch_size=3)
    fake.script({"status": 500, "name": "internal_server_error"})
    assert work(settings).retried == 3
    db.execute("UPDATE email_outbox SET available_at = now() WHERE status = 'pending'")
    assert work(settings).sent == 3
    assert {row(db, key)["status"] for key in keys} == {"sent"}
    [batch] = db.execute("SELECT * FROM email_batches").fetchall()
    assert batch["finished_at"] is not None and fake.stats()["batch_requests"] == 2


def test_worker_role_writes_only_its_columns_of_rows_on_their_way(
    roles: dict[str, str], db: Db
) -> None:
    """The worker cannot change a row's recipient, email, fingerprint, invoice or
    customer; it cannot touch sent or review rows (a sent receipt made pending again
    would be sent twice), nor mark a row sent without a provider id."""
    worker = roles["worker"]
    pending = insert_row(db, "in_1WkPending")
    sent = insert_row(db, "in_1WkSent", status="sent", provider_id="re_wk")
    waiting = insert_row(db, "in_1WkReview", status="review", review_reason="attempts_exhausted")
    for column, value in (
        ("fingerprint", "sha256:other"),
        ("invoice_id", "in_1Elsewhere"),
        ("customer_email", "attacker@example.net"),
        ("message_key", "platform/test/in_1Moved/invoice-paid"),
        ("delivery_status", "delivered"),
    ):
        assert refused(
            worker,
            f"UPDATE email_outbox SET {column} = %s WHERE message_key = %s",
            (value, pending),
        ), column
    before = {key: row(db, key) for key in (sent, waiting)}
    for key in (sent, waiting):
        assert (
            changed_rows(
                worker,
                "UPDATE email_outbox SET status = 'pending', attempts = 0 WHERE message_key = %s",
                (key,),
            )
            == 0
        )
        assert row(db, key) == before[key]
    assert refused(
        worker,
        "UPDATE email_outbox SET status = 'sent', sent_at = now() WHERE message_key = %s",
        (pending,),
    )
    assert row(db, pending)["status"] == "pending"


def test_attempt_history_is_append_only(roles: dict[str, str], db: Db) -> None:
    """A finished attempt cannot be rewritten, by the worker or by the owner; the worker
    can neither delete attempts nor move one to another receipt; finishing an attempt
    in flight (what the worker does) still works."""
    worker = roles["worker"]
    key = insert_row(db, "in_1History", status="review", review_reason="attempts_exhausted")
    insert_attempt(db, key, attempt=1, http_status=422, outcome="review")
    insert_attempt(db, key, attempt=2, finished=False)
    finished, in_flight = (
        found["id"]
        for found in db.execute(
            "SELECT id FROM email_attempts WHERE message_key = %s ORDER BY attempt", (key,)
        ).fetchall()
    )
    rewrite = "UPDATE email_attempts SET outcome = 'sent', http_status = 200 WHERE id = %s"
    assert refused(worker, rewrite, (finished,))
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
        db.execute(rewrite.encode(), (finished,))
    assert refused(worker, "DELETE FROM email_attempts WHERE id = %s", (finished,))
    assert refused(
        worker, "UPDATE email_attempts SET message_key = 'x' WHERE id = %s", (in_flight,)
    )
    assert refused(
        worker, "UPDATE email_attempts SET started_at = now() WHERE id = %s", (in_flight,)
    )
    assert (
        changed_rows(
            worker,
            "UPDATE email_attempts SET finished_at = now(), outcome = 'retry' WHERE id = %s",
            (in_flight,),
        )
        == 1
    )
    assert refused(worker, rewrite, (in_flight,))  # finished now: history
    outcomes = db.execute(
        "SELECT outcome FROM email_attempts WHERE message_key = %s ORDER BY attempt", (key,)
    ).fetchall()
    assert [found["outcome"] for found in outcomes] == ["review", "retry"]


@pytest.mark.parametrize("process", ["web", "worker", "operator"])
def test_each_process_role_may_run_every_statement_the_process_runs(
    process: str, roles: dict[str, str]
) -> None:
    """receipts.operations.privileges (what `receipts doctor` runs) finds nothing a
    process's role may not run, for each process's own login role."""
    with psycopg.connect(roles[process], row_factory=dict_row) as conn:
        assert privileges.refusals(conn, process) == []
        assert privileges.statements(process)


def test_the_privilege_check_names_what_a_role_lacks(roles: dict[str, str], db: Db) -> None:
    """The web role checked as a worker lacks UPDATE on email_outbox columns it does
    not hold and reading the attempt log's ids is fine: each refusal names the
    statement and the privilege, not only the server's message."""
    with psycopg.connect(roles["web"], row_factory=dict_row) as conn:
        found = {refusal.statement: refusal for refusal in privileges.refusals(conn, "worker")}
    assert set(found) == {
        "delivery.sql: claim_ready",
        "delivery.sql: freeze_rendered_payloads",
        "delivery.sql: review_unrenderable",
        "delivery.sql: record_attempts",
        "delivery.sql: record_sending_pause",
        "delivery.sql: clear_sending_pause",
        "delivery.sql: form_batches",
        "delivery.sql: claim_batches",
        "delivery.sql: batch_bodies",
        "delivery.sql: reserve_send_slot",
        "delivery.sql: send_pace_wait",
        "delivery.sql: hold_send_pace",
        "delivery.sql: record_team_limit",
    }
    claim = found["delivery.sql: claim_ready"]
    assert claim.reason.startswith("permission denied for table")
    assert any(f"on {table}" in claim.needs for table in CLAIM_TABLES)


def test_operator_role_runs_every_operator_command(
    roles: dict[str, str], environ: dict[str, str], db: Db, tmp_path: Any, capsys: Any
) -> None:
    """status, show, review list/resolve/retry/resend/dismiss and import all work as the
    operator role; it still cannot change a receipt's email or delete anything."""
    operator = {**environ, "DATABASE_URL": roles["operator"], "USER": "olga"}
    reviewed = insert_row(db, "in_1OpA", status="review", review_reason="attempts_exhausted")
    retried = insert_row(db, "in_1OpB", status="review", review_reason="attempts_exhausted")
    dismissed = insert_row(db, "in_1OpC", status="review", review_reason="attempts_exhausted")
    copied = insert_row(db, "in_1OpD", status="sent", provider_id="re_opd")
    addressless = insert_row(db, "in_1OpE", status="review", with_payload=False,
                             review_reason="missing_customer_email")  # fmt: skip
    invoice = stripe_events.invoice(id="in_1OpE", customer_email=None)
    stored = {"invoice": invoice, "created": 1764460801, "from": "billing@example.com"}
    db.execute(
        "UPDATE email_outbox SET render_input = %s WHERE message_key = %s",
        (Json(stored), addressless),
    )
    undone = insert_row(db, "in_1OpF", status="review", review_reason="attempts_exhausted")
    csv = tmp_path / "earlier.csv"
    csv.write_text("invoice_id,account,mode,sent_at,provider_id\nin_1OpOld,platform,live,"
                   "2026-10-01T12:00:00Z,re_old\n")  # fmt: skip
    commands = [
        ["status"],
        ["show", reviewed],
        ["review", "list"],
        ["review", "resolve", reviewed, "--provider-id", "re_found", "--reason", "in logs"],
        ["review", "retry", retried, "--reason", "fixed"],
        ["review", "dismiss", dismissed, "--reason", "refunded"],
        ["review", "resend", copied, "--accept-duplicate-risk", "--reason", "asked again"],
        ["review", "resend", addressless, "--to", "ap@example.org", "--reason", "she called"],
        ["review", "dismiss", undone, "--reason", "by mistake"],
        ["review", "retry", undone, "--undo-dismiss", "--reason", "undo the mistake"],
        ["import", str(csv)],
    ]
    for command in commands:
        code = main(command, operator)
        err = capsys.readouterr().err
        assert code == (1 if command == ["status"] else 0), (command, err)  # 1: needs a person
        assert "lacks a privilege" not in err, command
    assert row(db, reviewed)["status"] == "sent" and row(db, retried)["status"] == "pending"
    assert row(db, copied + "/resend-1")["status"] == "pending"
    assert row(db, addressless)["resent_as"] == addressless + "/resend-1"
    assert row(db, addressless + "/resend-1")["render_input"]["invoice"]["customer_email"] == (
        "ap@example.org"
    )
    assert row(db, undone)["status"] == "pending"
    assert row(db, "platform/live/in_1OpOld/invoice-paid")["status"] == "sent"
    operator_url = roles["operator"]
    assert refused(operator_url, "UPDATE email_outbox SET payload = '{}'")
    assert refused(operator_url, "DELETE FROM email_outbox")
    assert refused(operator_url, "DELETE FROM operator_actions")
    assert refused(operator_url, "UPDATE operator_actions SET reason = 'rewritten'")


def test_a_command_lacking_a_privilege_says_which_in_one_line(
    roles: dict[str, str], environ: dict[str, str], db: Db, capsys: Any
) -> None:
    """Operator commands run with the web or worker role's URL, and prune with the
    operator's, end with exit 2 and one line: the role, the privilege, the statement,
    what to do. (The web role may run `receipts status`: it reads what /metrics reads.)"""
    key = insert_row(db, "in_1Denied", status="review", review_reason="attempts_exhausted")
    as_web = {**environ, "DATABASE_URL": roles["web"], "USER": "olga"}
    as_worker = {**environ, "DATABASE_URL": roles["worker"], "USER": "olga"}
    for command, env in (
        (["status"], as_worker),
        (["show", key], as_web),
        (["review", "list"], as_web),
        (["review", "dismiss", key, "--reason", "test"], as_web),
    ):
        assert main(command, env) == 2, command
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert f"receipts {command[0]}: the database role" in err
        assert "lacks a privilege this command needs:" in err
        assert re.search(r"(SELECT|UPDATE|INSERT) on \w+", err), err
        assert "<prefix>_operator" in err
        if command[0] == "review":
            assert "(review.sql: " in err  # the command's own statements are named first
    as_operator = {**environ, "DATABASE_URL": roles["operator"]}
    assert main(["prune", "--keep-details-days", "30"], as_operator) == 2
    err = capsys.readouterr().err
    assert "DELETE on" in err and "owner of the tables" in err
    assert row(db, key)["status"] == "review"


def test_a_refused_command_prints_no_traceback(
    roles: dict[str, str], environ: dict[str, str]
) -> None:
    """The real console script as the web role: one line on stderr, exit 2."""
    result = subprocess.run(
        [sys.executable, "-m", "receipts.cli", "review", "list"],
        env={**environ, "DATABASE_URL": roles["web"], "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "lacks a privilege" in result.stderr


@pytest.fixture(scope="session")
def second_prefix(server_url: str) -> Iterator[str]:
    """Another installation's prefix on the same server."""
    name = session_prefix()
    yield name
    drop_group_roles(server_url, name)


def _in_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


def test_two_installations_on_one_server_take_two_prefixes(
    database_url: str, empty_database_url: str, prefix: str, second_prefix: str
) -> None:
    """Two prefixes in two databases of one server: each login role reaches its own
    database only, and applying one prefix again leaves the other's grants alone."""
    from receipts.migrations import migrate

    migrate(empty_database_url)
    apply_roles(database_url, prefix)
    apply_roles(empty_database_url, second_prefix)
    with logins(database_url, prefix) as one, logins(empty_database_url, second_prefix) as two:
        for url in (one["operator"], two["operator"]):
            with psycopg.connect(url) as conn:
                conn.execute("SELECT count(*) FROM stripe_events")
        other_database = urlsplit(empty_database_url).path.lstrip("/")
        assert refused(_in_database(one["operator"], other_database), "SELECT * FROM stripe_events")
        apply_roles(database_url, prefix)
        with psycopg.connect(two["operator"]) as conn:
            conn.execute("SELECT count(*) FROM stripe_events")


_GRANTS = """
    SELECT c.relname, c.relacl::text AS table_grants,
           (SELECT string_agg(a.attname || '=' || a.attacl::text, ',' ORDER BY a.attnum)
              FROM pg_attribute AS a
             WHERE a.attrelid = c.oid AND a.attacl IS NOT NULL) AS column_grants
      FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
     WHERE n.nspname = 'public'
     ORDER BY c.relname"""


def test_applying_the_script_again_changes_no_grant(database_url: str, db: Db, prefix: str) -> None:
    """The script is idempotent: run twice more on a database it was applied to, every
    table and column grant is as it was (what a rerun after an upgrade relies on)."""
    before = db.execute(_GRANTS).fetchall()
    assert any(prefix in (grant["table_grants"] or "") for grant in before)
    apply_roles(database_url, prefix)
    apply_roles(database_url, prefix)
    assert db.execute(_GRANTS).fetchall() == before


def test_a_prefix_that_is_not_a_plain_name_is_refused(database_url: str) -> None:
    """psql stops with the reason, and nothing is granted."""
    with pytest.raises(AssertionError, match="use lower-case letters"):
        apply_roles(database_url, "Bad-Prefix")


def test_the_console_decides_as_the_operator_role_beside_a_web_role(
    roles: dict[str, str], environ: dict[str, str], db: Db
) -> None:
    """The web process connects as <prefix>_web and its console as <prefix>_operator
    (RECEIPTS_CONSOLE_DATABASE_URL): failed logins are counted, pages read, a resend to a
    corrected address is decided. Without its own URL, the console says which role it
    needs instead of failing with a 500."""
    invoice = stripe_events.invoice(id="in_1RoleConsole", number="R-1", customer_email=None)
    split = {
        **environ,
        "DATABASE_URL": roles["web"],
        "RECEIPTS_CONSOLE_DATABASE_URL": roles["operator"],
    }
    with console_app(console_environ(split)) as app:
        browser = app.test_client()
        key = ingest(browser, invoice)
        assert log_in(browser, "olga", "wrong").status_code == 401
        assert log_in(browser, "olga").status_code == 303
        for page in ("/console/status", "/console/review", f"/console/receipt/{key}"):
            assert browser.get(page).status_code == 200, page
        form = browser.get(f"/console/receipt/{key}/decide/resend")
        seen = re.search(r'name="seen" value="([^"]+)"', form.get_data(as_text=True))
        assert seen is not None
        decided = browser.post(
            f"/console/receipt/{key}/decide/resend",
            data={
                "csrf_token": csrf_of(form),
                "seen": seen.group(1),
                "to": "j@example.com",
                "reason": "customer called",
            },
        )
        assert decided.status_code == 303
    assert row(db, f"{key}/resend-1")["customer_email"] == "j@example.com"
    web_only = {**environ, "DATABASE_URL": roles["web"]}
    with console_app(console_environ(web_only)) as app:
        refused = log_in(app.test_client(), "olga")
        assert refused.status_code == 503
        assert "must be a login role in &lt;prefix&gt;_operator" in refused.get_data(as_text=True)


def test_readyz_as_the_web_role_knows_the_migrations_and_an_older_grant_does_not_fail_it(
    roles: dict[str, str], environ: dict[str, str], db: Db, prefix: str
) -> None:
    """The web role reads schema_migrations and writes the probe row for /readyz. A
    deploy whose roles were granted before that (the script not rerun yet) stays ready
    rather than failing."""
    settings = load_settings({**environ, "DATABASE_URL": roles["web"]})
    app = create_app(settings)
    try:
        assert app.test_client().get("/readyz").status_code == 200
        assert db.execute("SELECT count(*) AS n FROM readiness_probe").fetchone() == {"n": 1}
    finally:
        app.extensions["receipts"].database.close()
    db.execute(f'REVOKE SELECT ON schema_migrations FROM "{prefix}_web"')
    db.execute(f'REVOKE ALL ON readiness_probe FROM "{prefix}_web"')
    app = create_app(settings)  # a process of its own: no verdict kept yet
    try:
        assert app.test_client().get("/readyz").status_code == 200
    finally:
        app.extensions["receipts"].database.close()
