"""POST /webhooks/resend: Svix-signed delivery events set delivery_status, once, in order.

Bodies are shaped as Resend's OpenAPI spec (resend/resend-openapi) has them:
``{"type", "created_at", "data": {"email_id", "created_at", "tags", …}}``,
with ``data.failed`` / ``data.suppressed`` / ``data.bounce`` for those types.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from receipts.config import ConfigError, load_settings
from receipts.message_keys import provider_tag
from receipts.operations.status_summary import read_status
from receipts.web import create_app
from receipts.web.metrics import WEBHOOKS
from tests.outbox_states import Db, insert_row, row
from tests.resend_events import SECRET, event, post


@pytest.fixture
def resend_app(environ: dict[str, str]) -> Iterator[Flask]:
    app = create_app(load_settings({**environ, "RESEND_WEBHOOK_SECRET": SECRET}))
    yield app
    app.extensions["receipts"].database.close()


@pytest.fixture
def resend(resend_app: Flask) -> FlaskClient:
    return resend_app.test_client()


def stored_events(db: Db) -> list[dict[str, Any]]:
    return db.execute("SELECT * FROM resend_events ORDER BY received_at").fetchall()


def test_delivered_sets_delivery_status_on_the_sent_row(resend: FlaskClient, db: Db) -> None:
    """The row matched by provider id gets delivered + the event's time; status stays sent."""
    key = insert_row(db, "in_1Deliv", status="sent", provider_id="re_email_1")
    response = post(resend, event("email.delivered", "re_email_1"))
    assert response.status_code == 200 and response.json == {"received": True, "outcome": "applied"}
    after = row(db, key)
    assert after["status"] == "sent" and after["delivery_status"] == "delivered"
    assert after["delivery_status_at"] == datetime(2026, 11, 30, 1, tzinfo=UTC)
    [stored] = stored_events(db)
    assert (stored["outcome"], stored["message_key"], stored["email_id"]) == (
        "applied",
        key,
        "re_email_1",
    )


def test_a_redelivered_event_changes_nothing(resend: FlaskClient, db: Db) -> None:
    """Same svix-id twice: stored once, the second answer says duplicate."""
    insert_row(db, "in_1Dup", status="sent", provider_id="re_email_2")
    document = event("email.bounced", "re_email_2")
    assert post(resend, document, svix_id="msg_same").json["outcome"] == "applied"
    assert post(resend, document, svix_id="msg_same").json["outcome"] == "duplicate"
    assert len(stored_events(db)) == 1


@pytest.mark.parametrize(
    ("arrivals", "final"),
    [
        (["email.delivery_delayed", "email.delivered"], "delivered"),
        (["email.delivered", "email.delivery_delayed"], "delivered"),
        (["email.bounced", "email.delivery_delayed"], "bounced"),
        (["email.delivered", "email.bounced"], "bounced"),
        (["email.delivered", "email.complained", "email.delivered"], "complained"),
    ],
)
def test_out_of_order_events_never_step_back(
    resend: FlaskClient, db: Db, arrivals: list[str], final: str
) -> None:
    """A late 'delayed' never hides 'delivered' or 'bounced'; a more final status wins."""
    key = insert_row(db, "in_1Order", status="sent", provider_id="re_email_3")
    outcomes = [post(resend, event(kind, "re_email_3")).json["outcome"] for kind in arrivals]
    assert row(db, key)["delivery_status"] == final
    assert outcomes[0] == "applied"
    if arrivals[-1] == "email.delivery_delayed":
        assert outcomes[-1] == "stale"


def test_unknown_email_id_is_recorded_answered_and_counted(
    resend: FlaskClient, db: Db, database_url: str
) -> None:
    """No row has this provider id: 200 (Resend cannot fix it by retrying), stored,
    counted by status and by the webhook counter."""
    labels = {
        "source": "resend",
        "type": "email.delivered",
        "outcome": "unknown_email",
        "code": "200",
    }
    before = WEBHOOKS.labels(**labels)._value.get()
    response = post(resend, event("email.delivered", "re_nobody"))
    assert response.status_code == 200 and response.json["outcome"] == "unknown_email"
    assert [e["outcome"] for e in stored_events(db)] == ["unknown_email"]
    assert WEBHOOKS.labels(**labels)._value.get() == before + 1
    status = read_status(db, retry_cutoff_hours=23)
    assert status.unknown_delivery_events_24h == 1


@pytest.mark.parametrize(
    "tags",
    [{"message_key": "platform_test_in_1T_invoice-paid"},
     [{"name": "message_key", "value": "platform_test_in_1T_invoice-paid"}]],
    ids=["object", "list"],
)  # fmt: skip
def test_the_message_key_tag_is_stored(resend: FlaskClient, db: Db, tags: Any) -> None:
    """Resend echoes our tags; the message_key tag is kept, to name the receipt of an
    email id no row has recorded."""
    document = event("email.delivered", "re_tagged")
    document["data"]["tags"] = tags
    assert post(resend, document).json["outcome"] == "unknown_email"
    [stored] = stored_events(db)
    assert stored["message_tag"] == "platform_test_in_1T_invoice-paid"


def test_other_event_types_are_recorded_and_ignored(resend: FlaskClient, db: Db) -> None:
    """email.opened and friends change nothing on the row."""
    key = insert_row(db, "in_1Open", status="sent", provider_id="re_email_4")
    assert post(resend, event("email.opened", "re_email_4")).json["outcome"] == "ignored"
    assert row(db, key)["delivery_status"] is None
    assert [e["event_type"] for e in stored_events(db)] == ["email.opened"]


def test_a_pending_row_is_never_touched(resend: FlaskClient, db: Db) -> None:
    """Only sent rows take a delivery status; nothing moves a row's status."""
    key = insert_row(db, "in_1Pending", provider_id="re_email_5")
    before = row(db, key)
    assert post(resend, event("email.delivered", "re_email_5")).json["outcome"] == "stale"
    assert row(db, key) == before


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        ("wrong_secret", "signature not verified"),
        ("stale", "signature not verified: Message timestamp too old"),
        ("no_headers", "missing svix-id, svix-timestamp, svix-signature header(s)"),
        ("garbled", "malformed svix-signature header"),
    ],
)
def test_unverified_deliveries_are_refused(
    resend: FlaskClient, db: Db, tamper: str, reason: str
) -> None:
    """Wrong secret, older than 5 minutes, missing or garbled headers: 400, nothing stored."""
    key = insert_row(db, "in_1Forged", status="sent", provider_id="re_email_6")
    document = event("email.bounced", "re_email_6")
    if tamper == "wrong_secret":
        other = "whsec_" + base64.b64encode(b"someone-else-entirely-0123456789").decode()
        response = post(resend, document, secret=other)
    elif tamper == "stale":
        response = post(resend, document, signed_at=datetime.now(UTC) - timedelta(minutes=6))
    elif tamper == "no_headers":
        response = resend.post("/webhooks/resend", data=json.dumps(document))
    else:
        response = resend.post(
            "/webhooks/resend",
            data=json.dumps(document),
            headers={"svix-id": "msg_x", "svix-timestamp": str(int(datetime.now(UTC).timestamp())),
                     "svix-signature": "garbage"},
        )  # fmt: skip
    assert response.status_code == 400
    assert response.json["error"].startswith(reason)
    assert stored_events(db) == [] and row(db, key)["delivery_status"] is None


def test_signed_but_not_an_event_is_refused(resend: FlaskClient, db: Db) -> None:
    assert post(resend, b"not json").status_code == 400
    assert post(resend, {"type": "email.delivered"}).json["error"] == (
        "not a Resend event: no 'data' object"
    )
    assert stored_events(db) == []


def test_not_configured_answers_503(client: FlaskClient, db: Db) -> None:
    """Without RESEND_WEBHOOK_SECRET the endpoint says so (503: Resend keeps retrying
    until it is configured) and stores nothing."""
    response = client.post("/webhooks/resend", data=b"{}")
    assert response.status_code == 503 and response.json is not None
    assert "RESEND_WEBHOOK_SECRET" in response.json["error"]
    assert stored_events(db) == []


def test_malformed_secret_stops_start_up(environ: dict[str, str]) -> None:
    """A secret that is not base64 is a configuration error naming the variable, found as
    the settings are read (so by every process and by doctor), before any app is made."""
    with pytest.raises(ConfigError) as error:
        create_app(load_settings({**environ, "RESEND_WEBHOOK_SECRET": "whsec_!!!not-base64!!!"}))
    assert error.value.variable == "RESEND_WEBHOOK_SECRET"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("type", "email.delivered\x00"),
        ("type", "email.\ud800"),
        ("email_id", "re_\x00"),
        ("email_id", "re_\udfff"),
        ("tag", "platform/test/in_1\x00/invoice-paid"),
        ("tag", "\ud800"),
    ],
    ids=["type-nul", "type-surrogate", "email_id-nul", "email_id-surrogate", "tag-nul",
         "tag-surrogate"],
)  # fmt: skip
def test_text_no_column_can_store_is_a_400_not_a_500(
    resend: FlaskClient, db: Db, field: str, value: str
) -> None:
    """A signed event whose type, email id or message_key tag holds ``\\u0000`` or
    a lone surrogate made PostgreSQL refuse the insert (500). It is refused with
    a JSON 400 and nothing is stored."""
    document = event("email.delivered", "re_email_text")
    if field == "type":
        document["type"] = value
    elif field == "email_id":
        document["data"]["email_id"] = value
    else:
        document["data"]["tags"] = {"message_key": value}
    response = post(resend, document)  # json.dumps escapes them: the body is ASCII
    assert response.status_code == 400, response.get_data()[:300]
    assert response.is_json
    assert stored_events(db) == []


# --- the customer got nothing: failed and suppressed ------------------------------


def failed(email_id: str, reason: str = "reached_daily_quota") -> dict[str, Any]:
    """email.failed as Resend's OpenAPI spec shapes it: data.failed.reason."""
    document = event("email.failed", email_id)
    document["data"]["failed"] = {"reason": reason}
    return document


def suppressed(email_id: str) -> dict[str, Any]:
    """email.suppressed: data.suppressed with reason, type, message, diagnosticCode."""
    document = event("email.suppressed", email_id)
    document["data"]["suppressed"] = {
        "reason": "previous_bounce",
        "type": "OnAccountSuppressionList",
        "message": "The recipient's address is on the account suppression list.",
        "diagnosticCode": ["smtp; 550 5.1.1 user unknown"],
    }
    return document


@pytest.mark.parametrize(
    ("document", "status", "detail"),
    [
        (failed("re_lost"), "failed", "reached_daily_quota"),
        (suppressed("re_lost"), "suppressed", "previous_bounce/OnAccountSuppressionList"),
    ],
    ids=["failed", "suppressed"],
)
def test_failed_and_suppressed_set_the_delivery_status_with_resends_reason(
    resend: FlaskClient, db: Db, document: dict[str, Any], status: str, detail: str
) -> None:
    """The sent receipt takes the status and the reason (machine words only, never
    Resend's free-text message); the event keeps the reason too; status stays sent."""
    key = insert_row(db, "in_1Lost", status="sent", provider_id="re_lost")
    assert post(resend, document).json["outcome"] == "applied"
    after = row(db, key)
    assert (after["status"], after["delivery_status"], after["delivery_detail"]) == (
        "sent",
        status,
        detail,
    )
    [stored] = stored_events(db)
    assert (stored["detail"], stored["message_key"]) == (detail, key)
    assert "suppression list" not in json.dumps(stored, default=str)


def test_a_late_delivered_or_delayed_never_hides_a_failure(resend: FlaskClient, db: Db) -> None:
    """failed outranks delayed and delivered, whatever order they arrive in."""
    key = insert_row(db, "in_1Late", status="sent", provider_id="re_late")
    post(resend, event("email.delivery_delayed", "re_late"))
    post(resend, failed("re_late", "invalid_recipient"))
    assert post(resend, event("email.delivered", "re_late")).json["outcome"] == "stale"
    assert (row(db, key)["delivery_status"], row(db, key)["delivery_detail"]) == (
        "failed",
        "invalid_recipient",
    )


def test_a_reason_that_is_not_machine_words_is_cut_down(resend: FlaskClient, db: Db) -> None:
    """Control characters, quotes and length are stripped from what Resend sent."""
    key = insert_row(db, "in_1Odd", status="sent", provider_id="re_odd")
    post(resend, failed("re_odd", "bad\n'reason'<script>" + "x" * 200))
    detail = row(db, key)["delivery_detail"]
    assert detail is not None and len(detail) <= 60 and detail.startswith("badreasonscript")


# --- evidence: a send the worker never recorded ------------------------------------


def tagged(event_type: str, email_id: str, key: str) -> dict[str, Any]:
    """An event carrying the message_key tag our payloads set (see receipt.py)."""
    document = event(event_type, email_id)
    document["data"]["tags"] = {"message_key": provider_tag(key)}
    return document


@pytest.mark.parametrize("event_type", ["email.sent", "email.delivered"])
def test_an_unknown_email_whose_tag_names_a_receipt_is_evidence_for_it(
    resend: FlaskClient, db: Db, event_type: str
) -> None:
    """The worker died after Resend accepted: no row has the email id, but the tag
    names the receipt. The event is stored as evidence for it, with when Resend
    accepted the email; the row itself is left for a person to resolve."""
    key = insert_row(db, "in_1Died", status="review", review_reason="attempts_exhausted")
    insert_row(db, "in_1Died", account="acct_1Other")  # same invoice, other account
    assert post(resend, tagged(event_type, "re_accepted", key)).json["outcome"] == "evidence"
    [stored] = stored_events(db)
    assert (stored["outcome"], stored["message_key"], stored["email_id"]) == (
        "evidence",
        key,
        "re_accepted",
    )
    assert stored["email_created_at"] == datetime(2026, 11, 30, 0, 59, 58, tzinfo=UTC)
    assert row(db, key)["status"] == "review" and row(db, key)["provider_id"] is None


def test_a_resend_is_named_by_its_own_tag(resend: FlaskClient, db: Db) -> None:
    """The tag of a deliberate resend (…/resend-1) names that row, not the original."""
    original = insert_row(db, "in_1Copy", status="sent", provider_id="re_first")
    copy = insert_row(db, "in_1Copy", key=f"{original}/resend-1")
    assert post(resend, tagged("email.sent", "re_copy", copy)).json["outcome"] == "evidence"
    assert stored_events(db)[0]["message_key"] == copy


def test_a_tag_that_names_no_receipt_is_not_evidence(resend: FlaskClient, db: Db) -> None:
    """Another sender on the same Resend account: email.sent is ignored, a status
    event is an unknown email, as before; nothing is linked to a receipt."""
    other = tagged("email.sent", "re_someone", "platform/test/in_1Else/invoice-paid")
    assert post(resend, other).json["outcome"] == "ignored"
    delivered = tagged("email.delivered", "re_someone", "platform/test/in_1Else/invoice-paid")
    assert post(resend, delivered).json["outcome"] == "unknown_email"
    assert post(resend, event("email.sent", "re_untagged")).json["outcome"] == "ignored"
    assert {e["message_key"] for e in stored_events(db)} == {None}


def test_email_sent_for_a_recorded_email_is_linked_and_changes_nothing(
    resend: FlaskClient, db: Db
) -> None:
    """The normal case: the row knows the id; email.sent sets no status."""
    key = insert_row(db, "in_1Normal", status="sent", provider_id="re_normal")
    assert post(resend, tagged("email.sent", "re_normal", key)).json["outcome"] == "ignored"
    assert stored_events(db)[0]["message_key"] == key
    assert row(db, key)["delivery_status"] is None
