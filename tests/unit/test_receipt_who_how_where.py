"""Who was paid, how, and where to ask: what a receipt says beyond its numbers."""

from __future__ import annotations

from typing import Any

from receipts.receipt.api_facts import ApiFacts, PaymentMethod
from receipts.receipt.rendering import Renderer
from tests import stripe_events
from tests.receipt_examples import VISA, email, example, renderer

CONTACT = Renderer(
    merchant_name="Acme Tools, Inc.",
    support_email="help@acme.example",
    support_url="https://acme.example/help",
)


def anonymous(**overrides: Any) -> dict[str, Any]:
    """An invoice whose account has no name."""
    return stripe_events.event(stripe_events.invoice(account_name=None, **overrides))


def test_the_merchant_is_named_by_the_invoice_then_the_setting_then_the_sender() -> None:
    """account_name, else RECEIPTS_MERCHANT_NAME, else EMAIL_FROM's display name."""
    named = email(
        stripe_events.event(stripe_events.invoice(account_name="Rossi Ceramics")), CONTACT
    )
    assert named["subject"].startswith("Receipt from Rossi Ceramics for invoice")
    assert email(anonymous(), CONTACT)["subject"].startswith("Receipt from Acme Tools, Inc.")
    sender = email(anonymous(), from_address="Northwind Maps <billing@northwind.example>")
    assert sender["subject"].startswith("Receipt from Northwind Maps for invoice")
    bare = email(anonymous(), from_address="billing@northwind.example")
    assert bare["subject"].startswith("Receipt for invoice")


def test_the_footer_says_where_to_ask_and_why_the_email_came() -> None:
    payload = email(example("invoice_paid"), CONTACT)
    text, html = payload["text"], payload["html"]
    assert (
        "Questions about this receipt? Write to help@acme.example or visit "
        "https://acme.example/help." in text
    )
    assert "invoice ACME-0042 from Acme Tools, Inc. was paid." in text
    assert '<a href="mailto:help@acme.example"' in html
    assert '<a href="https://acme.example/help"' in html
    only_mail = Renderer(support_email="help@acme.example")
    assert "Write to help@acme.example." in email(example("invoice_paid"), only_mail)["text"]
    assert "Questions" not in email(example("invoice_paid"))["text"]


def test_the_payment_method_is_read_from_an_expanded_charge_in_the_payload() -> None:
    """No API key needed when the sender expanded the charge; its receipt number comes too."""
    charge = {
        "id": "ch_1",
        "object": "charge",
        "receipt_number": "1466-5230",
        "payment_method_details": {
            "type": "card",
            "card": {"brand": "mastercard", "last4": "4444"},
        },
    }
    text = email(stripe_events.event(stripe_events.invoice(charge=charge)))["text"]
    assert "Payment method: Mastercard ending in 4444" in text
    assert "Receipt number: 1466-5230" in text


def test_a_basil_payment_and_a_single_allowed_kind_say_how_it_was_paid() -> None:
    """payments.data[].payment.payment_intent.latest_charge, else the one allowed type."""
    latest = {"payment_method_details": {"type": "sepa_debit", "sepa_debit": {"last4": "3000"}}}
    payments = {
        "data": [
            {
                "status": "paid",
                "payment": {"type": "payment_intent", "payment_intent": {"latest_charge": latest}},
            }
        ]
    }
    text = email(stripe_events.event(stripe_events.invoice(payments=payments)))["text"]
    assert "Payment method: SEPA Direct Debit ending in 3000" in text
    settings = {"payment_method_types": ["us_bank_account"]}
    only = email(stripe_events.event(stripe_events.invoice(payment_settings=settings)))["text"]
    assert "Payment method: Bank account" in only


def test_the_api_facts_give_the_charges_receipt_number() -> None:
    facts = ApiFacts(payment_method=VISA.payment_method, receipt_number="2270-1181")
    text = email(example("invoice_paid"), api_facts=facts)["text"]
    assert "Receipt number: 2270-1181\nInvoice number: ACME-0042" in text


def test_a_line_without_a_description_takes_its_products_name() -> None:
    line = {"amount": 1999, "description": None, "price": {"product": {"name": "Desk lamp"}}}
    invoice = stripe_events.invoice(lines={"object": "list", "data": [line], "has_more": False})
    assert "- Desk lamp: $19.99" in email(stripe_events.event(invoice))["text"]


def test_a_payload_without_lines_points_to_the_invoice() -> None:
    text = email(stripe_events.event(stripe_events.invoice()))["text"]
    assert "Items\n- See the invoice for the items.\n" in text


def test_the_invoices_own_fields_memo_footer_and_both_tax_ids_are_repeated() -> None:
    payload = email(example("invoice_paid_out_of_band"))
    for part in ("text", "html"):
        for shown in (
            "PO number",
            "PO-7731",
            "Thank you for choosing Acme for your workshop.",
            "350 Jay Street, Brooklyn",
            "FR40123456824",
            "12-3456789",
        ):
            assert shown in payload[part], (part, shown)


def test_credit_paid_and_out_of_band_invoices_say_how_they_were_settled() -> None:
    """They lead with the total and never say "received your payment of $0.00"."""
    credit = email(example("invoice_paid_credit_full"))
    assert "Your invoice ACME-0064 for $10.00 was paid from your credit balance." in credit["text"]
    assert "Payment method: Credit balance" in credit["text"]
    band = email(example("invoice_paid_out_of_band"))
    assert (
        "Your invoice ACME-0065 for $108.00 was marked as paid by Acme Tools, Inc.\n"
        in (band["text"])
    )
    for payload in (credit, band):
        assert "$0.00." not in payload["text"] and "payment of $0.00" not in payload["text"]
    hero = '<p style="margin:16px 0 0 0;font-size:30px;line-height:1.2;font-weight:700;'
    assert f'{hero}white-space:nowrap;">$108.00</p>' in band["html"]


def test_the_html_states_the_amount_once_above_the_totals() -> None:
    """The hero amount, then the totals: not again in the sentence, "Paid on" only once."""
    html = email(example("invoice_paid"), api_facts=VISA)["html"]
    above_items = html.split(">Items<")[0]
    assert above_items.count("$49.00") == 1 and above_items.count("Paid on") == 1


def test_a_long_count_is_written_as_the_locale_writes_numbers() -> None:
    listing = {
        "object": "list",
        "data": [{"amount": 0, "description": "Seat", "quantity": 1}],
        "has_more": True,
        "total_count": 1_000_001,
    }
    event = stripe_events.event(stripe_events.invoice(lines=listing, total=1999))
    assert "und 1.000.000 weitere Positionen" in email(event, renderer("de_DE"))["text"]


def test_dates_read_as_french_and_portuguese_readers_write_them() -> None:
    invoice = stripe_events.invoice(status_transitions={"paid_at": 1764550920})
    french = email(stripe_events.event(invoice), renderer("fr_FR"))["text"]
    assert "Date de paiement : 1er décembre 2025, 01:02 UTC" in french
    portuguese = email(stripe_events.event(invoice), renderer("pt_BR"))["text"]
    assert "1 de dezembro de 2025 às 01:02 UTC" in portuguese


def test_japanese_credit_lines_use_full_width_brackets() -> None:
    """The amount, then "credit" in full-width brackets, with no space between."""
    japanese = email(example("invoice_paid_subscription_update"), renderer("ja_JP"))["text"]
    full_width = "-$9.50\uff08\u30af\u30ec\u30b8\u30c3\u30c8\uff09"
    assert full_width in japanese and "(\u30af\u30ec\u30b8\u30c3\u30c8)" not in japanese


def test_the_last_digits_never_start_a_line_of_their_own() -> None:
    facts = ApiFacts(payment_method=PaymentMethod(kind="card", brand="visa", last4="4242"))
    html = email(example("invoice_paid"), renderer("de_DE"), api_facts=facts)["html"]
    assert "Visa mit den Endziffern\xa04242" in html
