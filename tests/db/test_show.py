"""``receipts show``: everything about one receipt, without leaking the email."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from flask.testing import FlaskClient

from receipts.cli import main
from receipts.config import load_settings
from receipts.message_keys import provider_tag
from receipts.web import create_app
from tests import stripe_events
from tests.outbox_states import BODY_TEXT, INVOICE_URL, Db, insert_attempt, insert_row, row
from tests.resend_events import SECRET as RESEND_SECRET
from tests.resend_events import event as resend_event
from tests.resend_events import post as post_resend
from tests.stripe_events import TEST_SECRET, encode, sign


def deliver(client: FlaskClient, event: dict[str, Any]) -> None:
    body = encode(event)
    response = client.post(
        "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
    )
    assert response.status_code == 200, response.json


def test_timeline_of_an_incident(
    client: FlaskClient, environ: dict[str, str], db: Db, capsys: Any
) -> None:
    """Events with delivery counts, the row, every attempt (an abandoned one flagged),
    operator actions and delivery events appear; the body and invoice link do not."""
    invoice = stripe_events.invoice(id="in_1Incident")
    first = stripe_events.event(invoice, event_id="evt_1First")
    deliver(client, first)
    deliver(client, first)
    deliver(client, stripe_events.event(invoice, event_id="evt_1Second"))
    key = "platform/test/in_1Incident/invoice-paid"
    insert_attempt(db, key, attempt=1, started_ago=timedelta(minutes=9), finished=False)
    insert_attempt(
        db, key, attempt=2, started_ago=timedelta(minutes=3), http_status=200, provider_id="re_42"
    )
    db.execute(
        """UPDATE email_outbox SET status = 'sent', provider_id = 're_42', sent_at = now(),
                  attempts = 2, delivery_status = 'delivered', delivery_status_at = now()
           WHERE message_key = %s""",
        (key,),
    )
    db.execute(
        """INSERT INTO operator_actions (message_key, action, performed_by, reason)
           VALUES (%s, 'resolve', 'alice', 'customer called')""",
        (key,),
    )
    db.execute(
        """INSERT INTO resend_events (svix_id, event_type, email_id, message_key, outcome)
           VALUES ('msg_1', 'email.delivered', 're_42', %s, 'applied')""",
        (key,),
    )

    assert main(["show", "in_1Incident"], environ) == 0
    out = capsys.readouterr().out
    assert f"receipt {key}" in out
    assert "status        sent" in out
    assert "evt_1First invoice.paid queued, 2 deliveries" in out
    assert "evt_1Second invoice.paid duplicate, 1 deliveries" in out
    assert "#1 " in out and "abandoned: the worker died mid-attempt" in out
    assert "#2 " in out and "http 200" in out and "provider id re_42" in out
    assert "resolve by alice: customer called" in out
    assert "email.delivered (applied) svix id msg_1" in out
    assert "delivery      delivered" in out
    assert "jenny.rosen@example.com" in out
    assert "invoice.stripe.com" not in out and "Thank you" not in out


def test_payload_only_on_request(environ: dict[str, str], db: Db, capsys: Any) -> None:
    """--payload adds the frozen email (body, link) to the text and the JSON output."""
    key = insert_row(db, "in_1Payload")
    assert main(["show", key], environ) == 0
    plain = capsys.readouterr().out
    assert INVOICE_URL not in plain and BODY_TEXT not in plain
    assert main(["show", key, "--payload"], environ) == 0
    assert INVOICE_URL in capsys.readouterr().out
    assert main(["show", key, "--json"], environ) == 0
    [document] = json.loads(capsys.readouterr().out)
    assert "payload" not in document and INVOICE_URL not in json.dumps(document)
    assert main(["show", key, "--json", "--payload"], environ) == 0
    [document] = json.loads(capsys.readouterr().out)
    assert document["payload"]["text"] == BODY_TEXT


def test_an_invoice_id_shows_every_receipt_of_it(
    environ: dict[str, str], db: Db, capsys: Any
) -> None:
    """Same invoice id under two accounts/modes and a resend: three timelines."""
    platform = insert_row(db, "in_1Many", status="sent", provider_id="re_1")
    connect = insert_row(db, "in_1Many", account="acct_1Other", livemode=True)
    resend = insert_row(db, "in_1Many", key=platform + "/resend-1")
    assert main(["show", "in_1Many", "--json"], environ) == 0
    keys = [timeline["message_key"] for timeline in json.loads(capsys.readouterr().out)]
    assert sorted(keys) == sorted([platform, connect, resend])


def test_json_lists_attempts_with_their_uncertainty(
    environ: dict[str, str], db: Db, capsys: Any
) -> None:
    """A timeout (no HTTP status) is flagged as possibly accepted; a 422 is not."""
    key = insert_row(db, "in_1Json", status="review", review_reason="validation_error", attempts=2)
    insert_attempt(db, key, attempt=1, http_status=None, outcome="retry")
    insert_attempt(
        db, key, attempt=2, http_status=422, outcome="review", provider_error="validation_error"
    )
    assert main(["show", key, "--json"], environ) == 0
    [document] = json.loads(capsys.readouterr().out)
    assert document["row"]["status"] == "review"
    assert document["row"]["review_reason"] == "validation_error"
    timeout, rejected = document["attempts"]
    assert timeout["uncertain"].startswith("no answer")
    assert rejected["uncertain"] is None and rejected["provider_error"] == "validation_error"


def test_unknown_key_or_invoice_exits_1(environ: dict[str, str], capsys: Any) -> None:
    """Nothing matches: a message naming what was looked for, exit 1."""
    assert main(["show", "platform/test/in_1Nope/invoice-paid"], environ) == 1
    assert "no receipt found for message key" in capsys.readouterr().err
    assert main(["show", "in_1Nope"], environ) == 1
    assert "no receipt found for invoice id 'in_1Nope'" in capsys.readouterr().err


def test_an_open_review_row_shows_how_to_decide(
    environ: dict[str, str], db: Db, capsys: Any
) -> None:
    """The decision commands are suggested, with a warning when an attempt that may have
    reached the provider is older than its idempotency window; not for dismissed rows."""
    key = insert_row(db, "in_1Hint", status="review", review_reason="retry_window_elapsed")
    insert_attempt(db, key, started_ago=timedelta(hours=25), finished=False)
    assert main(["show", key], environ) == 0
    out = capsys.readouterr().out
    assert f"decide        receipts review resolve|retry|resend|dismiss {key}" in out
    assert "older than its 24 h idempotency window" in out
    closed = insert_row(db, "in_1Closed", status="review", review_reason="dismissed")
    assert main(["show", closed], environ) == 0
    assert "decide" not in capsys.readouterr().out


def test_a_send_the_worker_never_recorded_is_shown_from_its_delivery_event(
    environ: dict[str, str], db: Db, capsys: Any
) -> None:
    """The worker died after the provider accepted: the row has no provider id, but
    Resend's delivery event carries the message_key tag, so it is stored as evidence
    for the row. show and review list offer its id and acceptance time, and resolve
    closes the case with that id and takes the delivery status Resend reported."""
    key = insert_row(db, "in_1Evidence", status="review", review_reason="retry_window_elapsed")
    insert_attempt(db, key, started_ago=timedelta(hours=25), finished=False)
    app = create_app(load_settings({**environ, "RESEND_WEBHOOK_SECRET": RESEND_SECRET}))
    try:
        document = resend_event("email.delivered", "re_unrecorded")
        document["data"]["tags"] = {"message_key": provider_tag(key)}
        answer = post_resend(app.test_client(), document)
    finally:
        app.extensions["receipts"].database.close()
    assert answer.json["outcome"] == "evidence"

    assert main(["show", key], environ) == 0
    out = capsys.readouterr().out
    assert "email re_unrecorded not recorded on this receipt (matched by tag)" in out
    accepted = "2026-11-30T00:59:58+00:00"  # data.created_at of the event
    assert f"Resend accepted email re_unrecorded with this receipt's tag at {accepted}" in out
    assert f"receipts review resolve {key} --provider-id re_unrecorded --sent-at {accepted}" in out
    assert main(["review", "list"], {**environ, "USER": "op"}) == 0
    listed = capsys.readouterr().out
    assert (
        f"Resend accepted it at {accepted} as email re_unrecorded; resolve with this id?" in listed
    )
    resolve = ["review", "resolve", key, "--provider-id", "re_unrecorded", "--sent-at", accepted,
               "--reason", "Resend reported it sent"]  # fmt: skip
    assert main(resolve, {**environ, "USER": "op"}) == 0
    resolved = row(db, key)
    assert (resolved["status"], resolved["provider_id"], resolved["delivery_status"]) == (
        "sent",
        "re_unrecorded",
        "delivered",
    )


def test_an_import_cannot_store_a_time_show_could_not_read(
    environ: dict[str, str], db: Db, tmp_path: Path, capsys: Any
) -> None:
    """A year-1 sent_at with a +14:00 offset would be stored as a BC date that makes
    `receipts show` fail: the import refuses it, and show answers normally."""
    csv_file = tmp_path / "old.csv"
    csv_file.write_text(
        "invoice_id,account,mode,sent_at,provider_id\n"
        "in_1Ancient,platform,live,0001-01-01T00:00:00+14:00,re_1\n"
    )
    assert main(["import", str(csv_file)], environ) == 1
    assert "is before 2000-01-01" in capsys.readouterr().err
    assert main(["show", "in_1Ancient"], environ) == 1
    assert "no receipt found for invoice id 'in_1Ancient'" in capsys.readouterr().err


def test_a_failed_or_suppressed_receipt_shows_resends_reason(
    environ: dict[str, str], db: Db, capsys: Any
) -> None:
    """email.failed arrives for a sent receipt: show says the customer did not get
    it, with Resend's reason, and lists the event with it."""
    key = insert_row(db, "in_1Failed", status="sent", provider_id="re_failed")
    app = create_app(load_settings({**environ, "RESEND_WEBHOOK_SECRET": RESEND_SECRET}))
    try:
        document = resend_event("email.failed", "re_failed")
        document["data"]["failed"] = {"reason": "reached_daily_quota"}
        assert post_resend(app.test_client(), document).json["outcome"] == "applied"
    finally:
        app.extensions["receipts"].database.close()
    assert main(["show", key], environ) == 0
    out = capsys.readouterr().out
    assert "delivery      failed (reached_daily_quota) at " in out
    assert "the customer did not get it" in out
    assert "email.failed (applied) svix id" in out and "reason reached_daily_quota" in out


def test_a_second_email_with_a_sent_receipts_tag_is_pointed_out(
    environ: dict[str, str], db: Db, capsys: Any
) -> None:
    """Resend reports another email id with the tag of a receipt recorded as sent:
    show warns that the customer may have two copies."""
    key = insert_row(db, "in_1Twice", status="sent", provider_id="re_first")
    db.execute(
        """INSERT INTO resend_events (svix_id, event_type, email_id, message_key, message_tag,
                                      outcome)
           VALUES ('msg_twice', 'email.sent', 're_second', %s, %s, 'evidence')""",
        (key, provider_tag(key)),
    )
    assert main(["show", key], environ) == 0
    assert "Resend also reported email re_second with this receipt's tag" in (
        capsys.readouterr().out
    )
