"""POST /webhooks/stripe against a real database: one row per paid invoice."""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import psutil
import psycopg
import pytest
import requests
from flask import Flask
from flask.testing import FlaskClient
from standardwebhooks import Webhook
from werkzeug.serving import make_server

from receipts.config import load_settings
from receipts.web import create_app
from tests import stripe_events
from tests.helpers import wait_for
from tests.outbox_states import insert_row
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
    assert post(client, event).json["redelivery"] is False
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
    # The email is rendered by the worker at the first claim, to this address.
    assert row["payload"] is None and row["render_input"] is not None
    assert row["customer_email"] == "jenny.rosen@example.com"
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
        ({"customer_email": "a@[b.com"}, "invalid_customer_email"),
        (
            {"customer_email": "=?utf-8?q?evil=40evil.example=2C?=@example.com"},
            "invalid_customer_email",
        ),
        ({"hosted_invoice_url": "https://example.com/i/1"}, "invalid_hosted_invoice_url"),
        (
            # urlsplit reads the host as invoice.stripe.com; a browser opens evil.example
            {"hosted_invoice_url": "https://evil.example\\@invoice.stripe.com/i/1"},
            "invalid_hosted_invoice_url",
        ),
    ],
)
def test_unusable_paid_invoice_becomes_a_review_row(
    client: FlaskClient, db: Any, overrides: dict[str, Any], reason: str
) -> None:
    """A paid invoice whose email or link cannot be used is a review row, answered 200."""
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
    """A zero total (a trial, a 100 % coupon) makes no receipt."""
    response = post(client, stripe_events.event(stripe_events.invoice(amount_paid=0, total=0)))
    assert response.json["outcome"] == "ignored"
    assert outbox(db) == []


def test_an_invoice_paid_without_a_charge_still_gets_its_receipt(
    client: FlaskClient, db: Any
) -> None:
    """amount_paid 0 with a total: paid from the credit balance, queued like any receipt."""
    invoice = stripe_events.invoice(amount_paid=0, starting_balance=-1999, ending_balance=0)
    response = post(client, stripe_events.event(invoice))
    assert response.json["outcome"] == "queued"
    assert len(outbox(db)) == 1


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
    # Stable names: the header holds a timestamp, and pytest-xdist needs every
    # worker to collect the same test ids.
    ids=["missing", "malformed", "no-v1", "wrong-secret", "stale"],
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


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_signed_event_carrying_a_number_json_has_not_gets_400(
    client: FlaskClient, db: Any, constant: str
) -> None:
    """Python reads NaN and the infinities; jsonb cannot store them: refused, not a 500."""
    text = encode(stripe_events.event()).decode()
    body = text.replace('"amount_paid": ', f'"amount_paid": {constant}, "was": ', 1).encode()
    assert body != text.encode()
    response = client.post(
        "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
    )
    assert response.status_code == 400
    assert response.get_json() == {"error": "body is not JSON"}
    assert events(db) == [] and outbox(db) == []


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
    assert ready.status_code == 503 and ready.json is not None
    assert ready.json["failing"] == "database"
    app.extensions["receipts"].database.close()


_BUILD_THE_APP = """
import json, os, sys, threading
from pathlib import Path

def sockets():
    found = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:"):
            found.add(target)
    return found

from receipts.config import load_settings
from receipts.web import create_app

threads, before = threading.active_count(), sockets()
app = create_app(load_settings(os.environ))
print(json.dumps({"threads": threading.active_count() - threads,
                  "sockets": sorted(sockets() - before)}))
"""


def test_building_the_app_starts_no_thread_and_opens_no_socket(environ: dict[str, str]) -> None:
    """gunicorn.conf.py builds the app in the arbiter and forks the workers from
    it: a thread would not survive the fork, a socket would be shared by them all.
    Measured in a process of its own, where nothing else opens sockets meanwhile."""
    built = subprocess.run(
        [sys.executable, "-c", _BUILD_THE_APP],
        env={**environ, "RESEND_WEBHOOK_SECRET": RESEND_SECRET, "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(built.stdout) == {"threads": 0, "sockets": []}


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


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("id", "evt_1Newline\n"),
        ("type", "invoice.paid\n"),
        ("account", "acct_1Newline\n"),
        ("invoice", "in_1Newline\n"),
    ],
)
def test_ids_are_matched_whole_so_a_trailing_newline_is_refused(
    client: FlaskClient, db: Any, where: str, value: str
) -> None:
    """A ``$`` anchor matches before a final newline: ``in_x\\n`` used to pass as an
    invoice id and become a message key whose send failed on every attempt. Every
    id and the event type are matched whole, so such an event is a 400 and
    nothing is stored."""
    event = stripe_events.event(stripe_events.invoice())
    if where == "invoice":
        event["data"]["object"]["id"] = value
    else:
        event[where] = value
    response = post(client, event)
    assert response.status_code == 400, response.json
    assert outbox(db) == [] and events(db) == []


def _signed_post_raw(client: FlaskClient, body: bytes) -> Any:
    return client.post(
        "/webhooks/stripe",
        data=body,
        headers={"Stripe-Signature": sign(body, TEST_SECRET), "Content-Type": "application/json"},
    )


def test_deep_nesting_with_a_lone_surrogate_is_a_400(client: FlaskClient, db: Any) -> None:
    """A signed event whose metadata nests ~1,000 levels deep around a ``\\ud800``
    escape made the surrogate check recurse past Python's limit (500) at the
    one depth the JSON parser still accepts, which depends on the stack in use.
    Every depth from a plausible one to past the parser's limit is refused with
    a JSON 400, and nothing is stored."""
    for depth in (40, *range(850, 1010)):
        event = stripe_events.event(stripe_events.invoice(metadata="NESTED"))
        nested = "[" * depth + '"\\ud800"' + "]" * depth
        body = encode(event).replace(b'"NESTED"', nested.encode())
        response = _signed_post_raw(client, body)
        assert response.status_code == 400, (depth, response.get_data()[:300])
        assert response.is_json
    assert outbox(db) == [] and events(db) == []


@pytest.mark.parametrize(
    "amount", [10**28, -(10**28), 10**20, 2**63, 10**400, 1e308, 99_999_999], ids=repr
)
def test_amounts_beyond_what_stripe_allows_never_answer_500(
    client: FlaskClient, db: Any, amount: int | float
) -> None:
    """``amount_paid`` of 10^28 made the amount formatting raise (500). Whatever
    the derivation makes of an absurd amount, the answer is a JSON 200 or 400:
    a 200 has its event row behind it; a 400 stores nothing."""
    event = stripe_events.event(stripe_events.invoice(amount_paid=amount, total=amount))
    response = post(client, event)
    assert response.status_code in (200, 400), response.get_data()[:300]
    assert response.is_json
    if response.status_code == 200:
        [recorded] = events(db)
        assert recorded["event_id"] == event["id"]
    else:
        assert outbox(db) == [] and events(db) == []


@pytest.mark.parametrize("amount", [10**20, 2**63], ids=repr)
def test_amounts_beyond_what_stripe_allows_are_never_queued(
    client: FlaskClient, db: Any, amount: int
) -> None:
    """An amount Stripe cannot produce (over twelve digits) is refused or sent to
    review; it never becomes an email."""
    response = post(client, stripe_events.event(stripe_events.invoice(amount_paid=amount)))
    assert response.status_code in (200, 400)
    assert [row["status"] for row in outbox(db)] in ([], ["review"])


def test_an_error_while_deriving_the_receipt_is_a_logged_400(
    client: FlaskClient, db: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Any unexpected error in the pure derivation (here reading the invoice fails on
    a value it does not expect) is answered 400 in JSON and logged at ERROR with the
    event id and the error's type, never its message; nothing is stored."""

    def fails(*args: Any, **kwargs: Any) -> None:
        raise ZeroDivisionError("a message that may quote customer data")

    monkeypatch.setattr("receipts.receipt.payload.read_invoice", fails)
    event = stripe_events.event()
    with caplog.at_level(logging.INFO, logger="receipts.web"):
        response = post(client, event)
    assert response.status_code == 400 and response.is_json
    [logged] = [r for r in caplog.records if "no receipt could be derived" in r.getMessage()]
    assert logged.levelno == logging.ERROR
    fields = logged.receipts_fields  # type: ignore[attr-defined]
    assert fields == {"event_id": event["id"], "error": "ZeroDivisionError"}
    assert outbox(db) == [] and events(db) == []


RESEND_SECRET = "whsec_" + base64.b64encode(b"receipts-resend-test-secret-32by").decode()


def test_read_only_database_answers_503_and_readyz_fails(
    environ: dict[str, str], database_url: str, db: Any
) -> None:
    """After a failover the web process may reach a server that refuses writes
    (here ``default_transaction_read_only = on`` for new sessions). Both webhooks
    answer 503 in JSON, so the senders retry, instead of Flask's HTML 500;
    ``/readyz`` checks that the database accepts writes and answers 503 with a
    short reason and no driver text; nothing is stored."""
    name = urlsplit(database_url).path.lstrip("/")
    db.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    app = create_app(load_settings({**environ, "RESEND_WEBHOOK_SECRET": RESEND_SECRET}))
    try:
        client = app.test_client()
        stripe = post(client, stripe_events.event())
        body = json.dumps({"type": "email.delivered", "data": {"email_id": "re_1"}})
        stamp = datetime.now(UTC)
        resend = client.post(
            "/webhooks/resend",
            data=body,
            headers={
                "svix-id": "msg_read_only",
                "svix-timestamp": str(int(stamp.timestamp())),
                "svix-signature": Webhook(RESEND_SECRET).sign("msg_read_only", stamp, body),
            },
        )
        ready = client.get("/readyz")
    finally:
        app.extensions["receipts"].database.close()
    for answer in (stripe, resend):
        assert answer.status_code == 503, answer.get_data()[:300]
        assert answer.json == {"error": "database unavailable, retry later"}
    assert ready.status_code == 503
    assert ready.json == {"status": "unavailable", "failing": "database", "reason": "read_only"}
    assert outbox(db) == [] and events(db) == []


def test_readyz_gives_a_short_reason_and_no_driver_text(environ: dict[str, str]) -> None:
    """With the database unreachable, ``/readyz`` (open to anyone) names the failing
    dependency and a short reason, never libpq's message (host, port, user)."""
    environ["DATABASE_URL"] = "postgresql://postgres@127.0.0.1:1/receipts"
    environ["RECEIPTS_DATABASE_TIMEOUT"] = "0.5"
    app = create_app(load_settings(environ))
    try:
        ready = app.test_client().get("/readyz")
    finally:
        app.extensions["receipts"].database.close()
    assert ready.status_code == 503
    assert ready.json == {"status": "unavailable", "failing": "database", "reason": "unreachable"}


def _signed_resend_post(client: FlaskClient, svix_id: str, email_id: str) -> Any:
    body = json.dumps({"type": "email.delivered", "data": {"email_id": email_id}})
    stamp = datetime.now(UTC)
    return client.post(
        "/webhooks/resend",
        data=body,
        headers={
            "svix-id": svix_id,
            "svix-timestamp": str(int(stamp.timestamp())),
            "svix-signature": Webhook(RESEND_SECRET).sign(svix_id, stamp, body),
        },
    )


@pytest.mark.parametrize("route", ["stripe", "resend"])
def test_a_locked_table_answers_503_within_the_statement_timeout(
    environ: dict[str, str], database_url: str, db: Any, route: str
) -> None:
    """A long migration or a stuck transaction holding a lock on the outbox used
    to stall every webhook for as long as the lock was held (15 s observed),
    outliving the sender's own timeout. With ``RECEIPTS_STATEMENT_TIMEOUT=1``
    the delivery waits about a second, answers 503 in JSON (the sender
    retries) and stores nothing; once the lock is gone the same delivery is
    stored."""
    settings = load_settings(
        {**environ, "RESEND_WEBHOOK_SECRET": RESEND_SECRET, "RECEIPTS_STATEMENT_TIMEOUT": "1"}
    )
    app = create_app(settings)
    client = app.test_client()
    event = stripe_events.event()
    insert_row(db, "in_1Locked", status="sent", provider_id="re_locked")

    def deliver() -> Any:
        if route == "stripe":
            return post(client, event)
        return _signed_resend_post(client, "msg_locked", "re_locked")

    holder = psycopg.connect(database_url)
    holder.execute("LOCK TABLE email_outbox IN ACCESS EXCLUSIVE MODE")
    release = threading.Timer(8, holder.rollback)  # an unfixed build waits this long
    release.start()
    try:
        started = time.monotonic()
        locked = deliver()
        waited = time.monotonic() - started
    finally:
        release.cancel()
        holder.rollback()
        holder.close()
    try:
        assert locked.status_code == 503, (waited, locked.get_data()[:300])
        assert locked.json == {"error": "database unavailable, retry later"}
        assert waited > 0.9  # it waited for the statement timeout (the 503 says it ended)
        assert deliver().status_code == 200
    finally:
        app.extensions["receipts"].database.close()


def test_stale_pooled_connections_do_not_fail_a_delivery(client: FlaskClient, db: Any) -> None:
    """After a database restart every connection the pool kept is dead, and each
    used to fail one request with 503 before the pool replaced it. A pooled
    connection the server has closed is now noticed before use and replaced:
    the first delivery and the first readiness check after the restart succeed."""
    assert post(client, stripe_events.event()).status_code == 200
    assert client.get("/readyz").status_code == 200
    sessions = db.execute(
        "SELECT pid, client_port FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchall()
    killed = [row["pid"] for row in sessions]
    assert killed
    db.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (killed,))

    def goodbyes_arrived() -> bool:
        """Every killed session's socket on our side has the server's close (no
        longer ESTABLISHED), as it would after a restart."""
        ports = {row["client_port"] for row in sessions}
        ours = psutil.Process().net_connections(kind="tcp")
        return not any(c.laddr.port in ports and c.status == "ESTABLISHED" for c in ours)

    wait_for(goodbyes_arrived, what="the server's close to reach the pool's sockets")
    assert post(client, stripe_events.event()).status_code == 200
    assert client.get("/readyz").status_code == 200
    assert len(outbox(db)) == 2


@pytest.mark.parametrize(
    ("ahead", "status"), [(10 * 365 * 86400, 400), (301 + 5, 400), (200, 200)], ids=repr
)
def test_a_signature_timestamped_in_the_future_beyond_the_tolerance_is_refused(
    client: FlaskClient, db: Any, ahead: int, status: int
) -> None:
    """Stripe's library only refuses timestamps too far in the past, so a
    signature dated ten years ahead was accepted (a captured delivery signed
    for the future stays replayable). A timestamp more than 300 s ahead is
    refused like a stale one; a clock a little ahead is still accepted."""
    response = post(client, stripe_events.event(), timestamp=int(time.time()) + ahead)
    assert response.status_code == status
    if status == 400:
        assert response.json == {"error": "signature timestamp outside the 300 s tolerance"}
        assert events(db) == []
