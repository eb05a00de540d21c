"""The pure event-to-receipt function and the email rendering."""

from __future__ import annotations

from typing import Any

import pytest

from receipts.message_keys import provider_tag
from receipts.receipt.derivation import Ignored, ReceiptJob, UnsendableReceipt, derive_receipt
from receipts.receipt.event import MalformedEvent, parse_event
from receipts.receipt.money import format_amount
from receipts.receipt.payload import render_payload
from receipts.receipt.rendering import Renderer
from receipts.receipt.stored_invoice import stored_invoice
from tests import stripe_events

RENDERER = Renderer()
FROM = "Billing <billing@example.com>"


def derive(event: dict[str, Any], **options: Any) -> Any:
    return derive_receipt(parse_event(event), email_from=FROM, **options)


def rendered(event: dict[str, Any], renderer: Renderer = RENDERER) -> dict[str, Any]:
    """The email the worker makes of the event's receipt at its first claim."""
    job = derive(event)
    assert isinstance(job, ReceiptJob)
    return render_payload(job.message_key, job.render_input, renderer)


def test_paid_invoice_becomes_a_job_with_the_scoped_key() -> None:
    """Platform, test mode: platform/test/{invoice}/invoice-paid, and the email made of it."""
    invoice = stripe_events.invoice(id="in_1Abc")
    job = derive(stripe_events.event(invoice))
    assert isinstance(job, ReceiptJob)
    assert job.message_key == "platform/test/in_1Abc/invoice-paid"
    assert job.recipient == "jenny.rosen@example.com"
    payload = render_payload(job.message_key, job.render_input, RENDERER)
    assert payload["from"] == FROM
    assert payload["to"] == ["jenny.rosen@example.com"]
    # No account_name: the sender's display name says who was paid.
    assert payload["subject"] == f"Receipt from Billing for invoice {invoice['number']}"
    assert "$19.99" in payload["text"] and "$19.99" in payload["html"]
    assert invoice["hosted_invoice_url"] in payload["text"]
    assert payload["tags"] == [
        {"name": "message_key", "value": "platform_test_in_1Abc_invoice-paid"}
    ]


def test_connect_and_live_mode_are_part_of_the_key() -> None:
    """The same invoice id under another account or mode is another message."""
    invoice = stripe_events.invoice(id="in_1Same")
    keys = {
        derive(stripe_events.event(invoice, account=account, livemode=live)).message_key
        for account in (None, "acct_1A", "acct_1B")
        for live in (False, True)
    }
    assert keys == {
        f"{account}/{mode}/in_1Same/invoice-paid"
        for account in ("platform", "acct_1A", "acct_1B")
        for mode in ("test", "live")
    }


def test_other_events_and_unpaid_invoices_are_ignored() -> None:
    assert derive(stripe_events.event(type="invoice.created")) == Ignored(
        reason="event_type_not_handled"
    )
    unpaid = stripe_events.invoice(status="open")
    assert derive(stripe_events.event(unpaid)) == Ignored(reason="invoice_not_paid")


def test_zero_value_policy_is_configurable() -> None:
    """Zero-value invoices (a zero total) are skipped by default and sent when asked."""
    zero = stripe_events.event(stripe_events.invoice(amount_paid=0, total=0))
    assert derive(zero) == Ignored(reason="zero_value")
    assert isinstance(derive(zero, send_zero_value=True), ReceiptJob)


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"customer_email": None}, "missing_customer_email"),
        ({"customer_email": "   "}, "missing_customer_email"),
        ({"customer_email": "not-an-address"}, "invalid_customer_email"),
        ({"customer_email": "a@[b.com"}, "invalid_customer_email"),
        (
            {"customer_email": "=?utf-8?q?evil=40evil.example=2C?=@example.com"},
            "invalid_customer_email",
        ),
        ({"hosted_invoice_url": None}, "invalid_hosted_invoice_url"),
        ({"hosted_invoice_url": "http://invoice.stripe.com/i/x"}, "invalid_hosted_invoice_url"),
        ({"hosted_invoice_url": "https://evil.example/i/x"}, "invalid_hosted_invoice_url"),
        (
            {"hosted_invoice_url": "https://invoice.stripe.com.evil.example/x"},
            "invalid_hosted_invoice_url",
        ),
        (
            {"hosted_invoice_url": "https://evil.example\\@invoice.stripe.com/i/x"},
            "invalid_hosted_invoice_url",
        ),
        (
            {"hosted_invoice_url": "https://invoice.stripe.com/i/x\nURGENT: https://evil.example"},
            "invalid_hosted_invoice_url",
        ),
        ({"amount_paid": "1999"}, "invalid_amount_paid"),
        ({"currency": 7}, "invalid_currency"),
    ],
)
def test_paid_invoice_without_a_usable_email_needs_review(
    overrides: dict[str, Any], reason: str
) -> None:
    """It keeps its key (so it is visible and deduplicated), says why, and keeps the
    invoice the email would be rendered from (for a resend to a corrected address)."""
    event = stripe_events.event(stripe_events.invoice(id="in_1Bad", **overrides))
    decision = derive(event)
    assert decision == UnsendableReceipt(
        message_key="platform/test/in_1Bad/invoice-paid",
        invoice_id="in_1Bad",
        reason=reason,
        fingerprint=decision.fingerprint,
        legacy_fingerprint=decision.legacy_fingerprint,
        render_input=decision.render_input,
    )
    assert decision.render_input["invoice"] == stored_invoice(event["data"]["object"])
    assert decision.render_input["created"] == event["created"]


@pytest.mark.parametrize(
    "event",
    [
        [],
        {"id": "evt_1", "type": "invoice.paid", "livemode": False},
        {"id": "nope", "type": "invoice.paid", "livemode": False, "data": {"object": {}}},
        {"id": "evt_1", "type": "invoice.paid", "livemode": "no", "data": {"object": {}}},
        {"id": "evt_1", "type": 5, "livemode": False, "data": {"object": {}}},
        {
            "id": "evt_1",
            "type": "invoice.paid",
            "livemode": False,
            "account": "x",
            "data": {"object": {}},
        },
        # a prefix alone names nothing
        {
            "id": "evt_1",
            "type": "invoice.paid",
            "livemode": False,
            "account": "acct_",
            "data": {"object": {}},
        },
        {"id": "evt_", "type": "invoice.paid", "livemode": False, "data": {"object": {}}},
    ],
)
def test_malformed_envelopes_are_rejected(event: Any) -> None:
    with pytest.raises(MalformedEvent):
        parse_event(event)


def test_invoice_paid_without_an_invoice_id_is_malformed() -> None:
    with pytest.raises(MalformedEvent, match="invoice id"):
        derive(stripe_events.event({"object": "invoice", "status": "paid"}))
    with pytest.raises(MalformedEvent, match="invoice id"):
        derive(stripe_events.event(stripe_events.invoice(id="in_")))


def test_fingerprint_follows_meaning() -> None:
    """A different amount or recipient is another fingerprint (so a conflict)."""
    invoice = stripe_events.invoice(id="in_1Fp")
    base = derive(stripe_events.event(invoice))
    for change in ({"amount_paid": 2000}, {"customer_email": "b@example.com"}):
        changed = derive(stripe_events.event({**invoice, **change}))
        assert changed.fingerprint != base.fingerprint


@pytest.mark.parametrize(
    ("amount", "currency", "shown"),
    [
        (1999, "usd", "$19.99"),
        (1500, "jpy", "¥1,500"),
        (50000, "krw", "₩50,000"),
        (12345, "bhd", "BHD\xa012.345"),
        (1000, "kwd", "KWD\xa01.000"),
        (50000, "isk", "ISK\xa0500"),
    ],
)
def test_amounts_follow_each_currency_minor_unit(amount: int, currency: str, shown: str) -> None:
    assert format_amount(amount, currency, "en_US") == shown


def test_templates_can_be_overridden_from_a_directory(tmp_path: Any) -> None:
    """A user's directory wins over the packaged template of the same name."""
    folder = tmp_path / "invoice_paid"
    folder.mkdir()
    (folder / "subject.txt").write_text("Paid: {{ invoice.number }} ({{ amount }})")
    payload = rendered(
        stripe_events.event(stripe_events.invoice(number="N-1")), Renderer(template_dir=tmp_path)
    )
    assert payload["subject"] == "Paid: N-1 ($19.99)"
    assert "Download a PDF" in payload["text"]


def test_html_escapes_invoice_fields() -> None:
    invoice = stripe_events.invoice(customer_name="<script>x</script>")
    html = rendered(stripe_events.event(invoice))["html"]
    assert "<script>" not in html
    assert "&lt;script&gt;" in html


def test_tag_value_keeps_only_characters_resend_allows() -> None:
    assert provider_tag("acct_1X/live/in_1Y/invoice-paid") == "acct_1X_live_in_1Y_invoice-paid"


@pytest.mark.parametrize(
    "pdf",
    [
        "https://evil.example\\@pay.stripe.com/invoice/x/pdf",
        "https://pay.stripe.com/invoice/x/pdf\nURGENT: https://evil.example/refund",
    ],
)
def test_a_pdf_link_a_browser_reads_as_another_host_is_left_out(pdf: str) -> None:
    """The receipt is sent without the PDF link rather than with one to another host."""
    payload = rendered(stripe_events.event(stripe_events.invoice(invoice_pdf=pdf)))
    assert "evil.example" not in payload["text"] + payload["html"]
