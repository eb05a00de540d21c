"""The email is rendered at a row's first claim and frozen before any send.

The webhook stores what the email is made from (``render_input``); the worker
renders it once, in the claim's transaction, and every attempt sends the
stored bytes (docs/architecture.md, "The frozen payload and the fingerprint").
"""

from __future__ import annotations

import base64
import json
import logging
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient
from psycopg.rows import dict_row

from receipts.config import Settings
from receipts.delivery.claims import claim_ready
from receipts.ingest.verification import decode_event
from receipts.operations import review_decisions
from receipts.operations.review import Decider
from receipts.receipt.derivation import ReceiptJob, derive_receipt
from receipts.receipt.payload import render_payload
from receipts.receipt.rendering import Renderer
from tests import stripe_events
from tests.fake_provider import FakeProviderClient
from tests.receipt_examples import EXAMPLES
from tests.stripe_events import TEST_SECRET, encode, sign
from tests.worker_runs import work

Row = dict[str, Any]
DB = psycopg.Connection[Row]


def deliver(client: FlaskClient, event: dict[str, Any]) -> str:
    body = encode(event)
    response = client.post(
        "/webhooks/stripe",
        data=body,
        headers={"Stripe-Signature": sign(body, TEST_SECRET), "Content-Type": "application/json"},
    )
    assert response.status_code == 200 and response.json is not None, response.json
    key: str = response.json["message_key"]
    return key


def stored(db: DB, key: str) -> Row:
    found = db.execute(
        "SELECT status, payload, payload::text AS payload_text, render_input, review_reason, "
        "last_error FROM email_outbox WHERE message_key = %s",
        (key,),
    ).fetchone()
    assert found is not None
    return found


def test_the_first_claim_renders_what_ingest_would_have_and_freezes_it(
    client: FlaskClient, db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """The webhook stores no email; the worker renders it, stores it, drops the input,
    and sends exactly the stored bytes: the same email a render in the webhook makes."""
    event = stripe_events.event(stripe_events.invoice(id="in_1FirstClaim"))
    key = deliver(client, event)
    assert stored(db, key)["payload"] is None
    assert work(worker_settings).sent == 1
    row = stored(db, key)
    assert row["status"] == "sent" and row["render_input"] is None
    [delivery] = fake.deliveries()
    assert delivery["body"] == row["payload_text"] and delivery["key"] == key
    header, _ = decode_event(encode(event).decode())
    job = derive_receipt(header, email_from="Billing <billing@example.com>")
    assert isinstance(job, ReceiptJob)
    made_here = render_payload(key, job.render_input, Renderer.from_settings(worker_settings))
    assert made_here == row["payload"]


def test_every_attempt_after_the_first_claim_sends_the_same_bytes(
    client: FlaskClient, db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """A 500 on the first attempt: the email frozen at that claim is what the retry sends."""
    key = deliver(client, stripe_events.event(stripe_events.invoice(id="in_1Retried")))
    fake.script({"status": 500, "name": "internal_server_error"})
    assert work(worker_settings).retried == 1
    first = stored(db, key)
    assert first["status"] == "pending" and first["payload"] is not None
    db.execute("UPDATE email_outbox SET available_at = now() WHERE message_key = %s", (key,))
    assert work(worker_settings).sent == 1
    [delivery] = fake.deliveries()
    assert delivery["body"] == first["payload_text"] == stored(db, key)["payload_text"]


def test_a_redelivery_after_the_first_claim_changes_nothing(
    client: FlaskClient, db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """Stripe delivers the event again once the email is frozen and sent: a duplicate."""
    event = stripe_events.event(stripe_events.invoice(id="in_1After"))
    key = deliver(client, event)
    work(worker_settings)
    before = stored(db, key)
    body = encode(event)
    again = client.post(
        "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
    )
    assert again.json is not None and again.json["redelivery"] is True
    assert stored(db, key) == before and work(worker_settings).sent == 0


def test_an_email_the_templates_cannot_render_goes_to_review_and_the_rest_is_sent(
    client: FlaskClient,
    db: DB,
    fake: FakeProviderClient,
    worker_settings: Settings,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A subject template that divides by zero for one invoice number only (so it
    passes the start-up check): that row goes to review as render_failed with the
    error's type (never its message), its attempt ends as review, the other is sent."""
    folder = tmp_path / "invoice_paid"
    folder.mkdir()
    (folder / "subject.txt").write_text(
        "Receipt {{ 1 // (0 if receipt.number.startswith('ABC-') else 1) }}"
    )
    broken = deliver(client, stripe_events.event(stripe_events.invoice(number="ABC-1")))
    fine = deliver(client, stripe_events.event(stripe_events.invoice(id="in_1Fine", number="OK-1")))
    with caplog.at_level(logging.ERROR, logger="receipts.delivery.claims"):
        summary = work(replace(worker_settings, template_dir=tmp_path))
    assert (summary.sent, summary.review) == (1, 1)
    row = stored(db, broken)
    assert (row["status"], row["review_reason"]) == ("review", "render_failed")
    assert row["last_error"] == "ZeroDivisionError" and row["payload"] is None
    [attempt] = db.execute(
        "SELECT outcome, finished_at FROM email_attempts WHERE message_key = %s", (broken,)
    ).fetchall()
    assert attempt["outcome"] == "review" and attempt["finished_at"] is not None
    assert stored(db, fine)["status"] == "sent"
    review_decisions.retry(
        db, broken, Decider(performed_by="olga", reason="fixed"), retry_cutoff_hours=23
    )
    assert work(worker_settings).sent == 1  # the shipped templates render it
    [logged] = [r for r in caplog.records if "cannot be rendered" in r.getMessage()]
    assert logged.receipts_fields == {  # type: ignore[attr-defined]
        "key": broken,
        "reason": "render_failed",
        "error": "ZeroDivisionError",
    }


def test_a_row_stored_with_its_email_is_sent_as_stored(
    client: FlaskClient, db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """Rows an earlier release rendered in the webhook (and resends, imports) carry
    their email: the worker renders nothing and sends it byte for byte."""
    key = deliver(client, stripe_events.event(stripe_events.invoice(id="in_1Legacy")))
    db.execute(
        "UPDATE email_outbox SET payload = %s::jsonb, render_input = NULL WHERE message_key = %s",
        (
            '{"from": "billing@example.com", "to": ["jenny.rosen@example.com"], '
            '"subject": "as stored", "text": "stored before", "html": "<p>stored before</p>"}',
            key,
        ),
    )
    assert work(worker_settings).sent == 1
    [delivery] = fake.deliveries()
    assert delivery["body"] == stored(db, key)["payload_text"]


def test_a_first_claim_whose_lease_ran_out_before_the_freeze_lets_the_row_go(
    client: FlaskClient, db: DB, database_url: str
) -> None:
    """Another worker took the row between the claim and the freeze (the lease ran
    out meanwhile): this claim stores nothing and hands the row to no sender."""
    key = deliver(client, stripe_events.event(stripe_events.invoice(id="in_1LeaseGone")))

    def render_while_the_lease_is_taken(found: str, render_input: dict[str, Any]) -> dict[str, Any]:
        db.execute(
            "UPDATE email_outbox SET lease_token = gen_random_uuid() WHERE message_key = %s",
            (found,),
        )
        return {"to": ["jenny.rosen@example.com"], "subject": "late"}

    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        claim = claim_ready(
            conn,
            limit=5,
            worker_id="w-late",
            lease_seconds=60,
            max_attempts=10,
            retry_cutoff_hours=23,
            render=render_while_the_lease_is_taken,
        )
    assert (claim.rows, claim.skipped) == ([], [])
    assert stored(db, key)["payload"] is None


def example_event(name: str, invoice_id: str, **changes: Any) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EXAMPLES / f"{name}.json").read_text(encoding="utf-8"))
    event["id"] = "evt_" + invoice_id
    event["data"]["object"].update(id=invoice_id, **changes)
    return event


def test_a_receipt_that_would_not_add_up_goes_to_review_with_its_numbers(
    client: FlaskClient, db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """Rows that cannot reach Stripe's total are never sent: review, the numbers in last_error."""
    key = deliver(client, example_event("invoice_paid_tax_two_discounts", "in_1Off", total=24500))
    summary = work(worker_settings)
    assert (summary.sent, summary.review) == (0, 1) and fake.deliveries() == []
    row = stored(db, key)
    assert (row["status"], row["review_reason"]) == ("review", "receipt_does_not_add_up")
    assert row["last_error"] == (
        "usd: subtotal 26100 - discounts 3393 + shipping 0 + taxes 1805 = 24512, "
        "but the total is 24500"
    )


def test_credit_paid_and_out_of_band_invoices_each_get_one_receipt(
    client: FlaskClient, db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """$10.00 from the credit balance and $108.00 marked as paid: amount_paid 0, yet a
    purchase; each gets one receipt that says how it was settled, and who was paid when
    the invoice has no name (RECEIPTS_MERCHANT_NAME, read by the worker)."""
    credit = deliver(client, example_event("invoice_paid_credit_full", "in_1Credit"))
    marked = deliver(
        client, example_event("invoice_paid_out_of_band", "in_1Marked", account_name=None)
    )
    named = replace(worker_settings, merchant_name="Acme Tools, Inc.")
    assert work(named).sent == 2
    texts = {d["key"]: json.loads(d["body"])["text"] for d in fake.deliveries()}
    assert "ACME-0064 for $10.00 was paid from your credit balance." in texts[credit]
    assert "ACME-0065 for $108.00 was marked as paid by Acme Tools, Inc.\n" in texts[marked]
    assert {stored(db, key)["status"] for key in (credit, marked)} == {"sent"}


RENDER_IN_ANOTHER_PROCESS = """
import json, sys
from receipts.config import load_settings
from receipts.delivery.first_render import payload_renderer
key, render_input = json.load(sys.stdin)
settings = load_settings({**json.loads(sys.argv[1])})
print(json.dumps(payload_renderer(settings)(key, render_input)))
"""


def test_the_pdf_is_the_same_bytes_across_a_crash_and_replay(
    client: FlaskClient, db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """RECEIPTS_ATTACH_PDF: a worker process that rendered the row and died before the
    freeze, the worker that claims it next, and the retry after a 500 all carry the same
    PDF bytes; the retry sends exactly the frozen payload."""
    settings = replace(worker_settings, attach_pdf=True)
    key = deliver(client, stripe_events.event(stripe_events.invoice(id="in_1PdfCrash")))
    render_input = stored(db, key)["render_input"]
    environment = {
        "DATABASE_URL": settings.database_url,
        "RESEND_API_KEY": "re_test",
        "EMAIL_FROM": "Billing <billing@example.com>",
        "RECEIPTS_ATTACH_PDF": "true",
    }
    died = subprocess.run(
        [sys.executable, "-c", RENDER_IN_ANOTHER_PROCESS, json.dumps(environment)],
        input=json.dumps([key, render_input]),
        capture_output=True,
        text=True,
        check=True,
    )
    [rendered_before_the_crash] = json.loads(died.stdout)["attachments"]
    assert stored(db, key)["payload"] is None  # it died before the freeze

    fake.script({"status": 500, "name": "internal_server_error"})
    assert work(settings).retried == 1
    frozen = stored(db, key)
    [attached] = frozen["payload"]["attachments"]
    assert attached == rendered_before_the_crash
    assert attached["filename"] == "receipt-" + render_input["invoice"]["number"] + ".pdf"
    assert base64.b64decode(attached["content"]).startswith(b"%PDF-")

    db.execute("UPDATE email_outbox SET available_at = now() WHERE message_key = %s", (key,))
    assert work(settings).sent == 1
    [delivery] = fake.deliveries()
    assert delivery["body"] == frozen["payload_text"] == stored(db, key)["payload_text"]
    assert json.loads(delivery["body"])["attachments"] == [rendered_before_the_crash]
