"""``receipts show`` finds receipts by what support has: every look-up form on a real database.

Receipts and events are made the way production makes them, through the
webhook, so the facts a look-up uses (invoice number, customer address) are
the ones ingest stores.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient

from receipts.cli import main
from receipts.config import load_settings
from receipts.message_keys import provider_tag
from receipts.operations.lookup import (
    EMAIL,
    EVENT_ID,
    INVOICE_ID,
    INVOICE_NUMBER,
    MESSAGE_KEY,
    PROVIDER_ID,
    kind_of,
)
from receipts.web import create_app
from tests import stripe_events, stripe_objects
from tests.outbox_states import Db, insert_attempt, insert_row
from tests.resend_events import SECRET as RESEND_SECRET
from tests.resend_events import event as resend_event
from tests.resend_events import post as post_resend
from tests.stripe_events import TEST_SECRET, encode, sign


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


def deliver(client: FlaskClient, event: dict[str, Any]) -> dict[str, Any]:
    body = encode(event)
    response = client.post(
        "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
    )
    answer: dict[str, Any] | None = response.json
    assert response.status_code == 200 and answer is not None, answer
    return answer


def show(environ: dict[str, str], capsys: Any, *args: str) -> tuple[int, str, str]:
    code = main(["show", *args], environ)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_targets_are_told_apart_by_their_shape() -> None:
    """Keys have slashes, ids their Stripe prefix, addresses an @, Resend ids are UUIDs;
    anything else is taken for an invoice number."""
    assert kind_of("platform/live/in_1A/invoice-paid") == MESSAGE_KEY
    assert kind_of("in_1A") == INVOICE_ID
    assert kind_of("evt_1A") == EVENT_ID
    assert kind_of("reconcile:in_1A") == EVENT_ID
    assert kind_of("Jenny.Rosen@example.com") == EMAIL
    assert kind_of("49a3999c-0ce1-4ea6-ab68-afcd6dc2e794") == PROVIDER_ID
    assert kind_of("file_" + "0" * 32) == PROVIDER_ID
    assert kind_of("ACME-0102") == INVOICE_NUMBER


def test_an_invoice_number_finds_its_receipt_in_any_letter_case(
    client: FlaskClient, environ: dict[str, str], capsys: Any
) -> None:
    """`receipts show acme-0102` finds the receipt of invoice ACME-0102 and prints its
    number, amount and recipient; another invoice's receipt is not shown."""
    deliver(client, stripe_events.event(stripe_events.invoice(id="in_1Acme", number="ACME-0102")))
    deliver(client, stripe_events.event(stripe_events.invoice(id="in_1Other", number="ACME-0103")))
    code, out, _ = show(environ, capsys, "acme-0102")
    assert code == 0
    assert "receipt platform/test/in_1Acme/invoice-paid" in out
    assert "invoice       in_1Acme (ACME-0102, $19.99)" in out
    assert "jenny.rosen@example.com" in out
    assert "in_1Other" not in out


def test_an_email_address_finds_every_receipt_to_it_newest_first(
    client: FlaskClient, environ: dict[str, str], db: Db, capsys: Any
) -> None:
    """All receipts to the address (any letter case), newest first; not those to others."""
    for n in (1, 2, 3):
        invoice = stripe_events.invoice(id=f"in_1Mail{n}", customer_email="Ann@Example.com")
        deliver(client, stripe_events.event(invoice))
        db.execute(
            "UPDATE email_outbox SET created_at = now() - make_interval(hours => %s) "
            "WHERE invoice_id = %s",
            (10 - n, f"in_1Mail{n}"),
        )
    deliver(client, stripe_events.event(stripe_events.invoice(id="in_1NotAnn")))
    code, out, _ = show(environ, capsys, "ann@example.com", "--json")
    assert code == 0
    keys = [entry["message_key"] for entry in json.loads(out)]
    assert keys == [f"platform/test/in_1Mail{n}/invoice-paid" for n in (3, 2, 1)]
    code, out, _ = show(environ, capsys, "ann@example.com")
    assert "3 receipts for email address ann@example.com:" in out


def test_a_zero_value_invoice_says_it_was_ignored_and_why(
    client: FlaskClient, environ: dict[str, str], capsys: Any
) -> None:
    """A zero-value invoice made no receipt: its number, its in_ id and its customer's
    address each find the ignored event and say why, with exit 0."""
    zero = stripe_events.invoice(id="in_1Zero", number="ACME-0000", amount_paid=0, total=0)
    deliver(client, stripe_events.event(zero, event_id="evt_1Zero"))
    for target in ("ACME-0000", "in_1Zero", "jenny.rosen@example.com"):
        code, out, _ = show(environ, capsys, target)
        assert code == 0, target
        assert "evt_1Zero invoice.paid for in_1Zero (ACME-0000, jenny.rosen@example.com)" in out
        assert "ignored (zero_value): the invoice's total is zero" in out
        assert "RECEIPTS_SEND_ZERO_VALUE=true" in out
    code, out, _ = show(environ, capsys, "ACME-0000", "--json")
    [entry] = json.loads(out)
    assert entry["message_key"] is None
    assert entry["stripe_event"]["detail"] == "zero_value"
    assert entry["verdict"].startswith("ignored (zero_value)")


def test_an_event_id_says_what_the_event_became(
    client: FlaskClient, environ: dict[str, str], capsys: Any
) -> None:
    """evt_… of the event that made the receipt, of a duplicate and of a conflict: each
    says what it became, then shows the receipt it names."""
    invoice = stripe_events.invoice(id="in_1Verdict")
    deliver(client, stripe_events.event(invoice, event_id="evt_1Made"))
    deliver(client, stripe_events.event(invoice, event_id="evt_1Dup"))
    changed = {**invoice, "amount_paid": 2999, "total": 2999}
    deliver(client, stripe_events.event(changed, event_id="evt_1Clash"))
    key = "platform/test/in_1Verdict/invoice-paid"

    code, out, _ = show(environ, capsys, "evt_1Made")
    assert code == 0 and f"made receipt {key}" in out and f"receipt {key}" in out
    code, out, _ = show(environ, capsys, "evt_1Dup")
    assert f"duplicate of receipt {key}: same invoice and same content" in out
    code, out, _ = show(environ, capsys, "evt_1Clash")
    assert f"conflict with receipt {key}: same invoice, different content" in out
    assert "status        pending" in out
    code, out, _ = show(environ, capsys, "evt_1Clash", "--json")
    [entry] = json.loads(out)
    assert entry["message_key"] == key and entry["verdict"].startswith("conflict")


def test_an_invalid_customer_email_is_shown_as_the_invoice_gave_it(
    client: FlaskClient, environ: dict[str, str], capsys: Any
) -> None:
    """A review row made because the address is malformed shows that address."""
    bad = stripe_events.invoice(id="in_1BadMail", number="ACME-0666", customer_email="jenny@@x")
    deliver(client, stripe_events.event(bad))
    code, out, _ = show(environ, capsys, "ACME-0666")
    assert code == 0
    assert "status        review (invalid_customer_email)" in out
    assert "customer      jenny@@x (as the invoice gave it)" in out


def test_the_providers_email_id_finds_the_receipt(
    environ: dict[str, str], db: Db, capsys: Any
) -> None:
    """A Resend email id finds the receipt sent with it, one whose attempt got it but was
    not recorded as sent, and one only a delivery event's tag names."""
    sent_id, attempt_id, tagged_id = (str(uuid.uuid4()) for _ in range(3))
    sent = insert_row(db, "in_1Sent", status="sent", provider_id=sent_id)
    lost = insert_row(db, "in_1Lost", status="review", review_reason="retry_window_elapsed")
    insert_attempt(db, lost, provider_id=attempt_id, outcome="lease_lost")
    tagged = insert_row(db, "in_1Tagged", status="review", review_reason="attempts_exhausted")
    document = resend_event("email.delivered", tagged_id)
    document["data"]["tags"] = {"message_key": provider_tag(tagged)}
    app = create_app(load_settings({**environ, "RESEND_WEBHOOK_SECRET": RESEND_SECRET}))
    try:
        assert post_resend(app.test_client(), document).status_code == 200
    finally:
        app.extensions["receipts"].database.close()

    for provider_id, key in ((sent_id, sent), (attempt_id, lost), (tagged_id, tagged)):
        code, out, _ = show(environ, capsys, provider_id, "--json")
        assert code == 0, provider_id
        assert [entry["message_key"] for entry in json.loads(out)] == [key]


def test_a_thin_event_waiting_for_its_invoice_says_so(
    client: FlaskClient, environ: dict[str, str], capsys: Any
) -> None:
    """A stored thin notification whose invoice was never fetched (no API key) is shown
    as waiting, with what fetches it."""
    notification = stripe_objects.thin_notification("in_1ThinWait", event_id="evt_1ThinWait")
    data, headers = stripe_objects.signed(notification, TEST_SECRET)
    client.post("/webhooks/stripe", data=data, headers=headers)
    code, out, _ = show(environ, capsys, "evt_1ThinWait")
    assert code == 0
    assert "thin event evt_1ThinWait v1.invoice.paid for in_1ThinWait" in out
    assert "has not been fetched from Stripe's API yet" in out


def test_nothing_found_names_what_was_looked_for_and_what_it_means(
    environ: dict[str, str], capsys: Any
) -> None:
    """No receipt and no event: exit 1, one message saying the event never reached us
    (or was pruned) and how to find paid invoices without a receipt."""
    for target, kind in (
        ("ACME-9999", "invoice number"),
        ("nobody@example.com", "email address"),
        ("evt_1Never", "event id"),
    ):
        code, out, err = show(environ, capsys, target)
        assert code == 1 and out == ""
        assert f"no receipt found for {kind} {target!r}, and no Stripe event names it" in err
        assert "receipts reconcile" in err
