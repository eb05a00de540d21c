"""Who was paid, how, and where to ask: what a receipt says beyond its numbers."""

from __future__ import annotations

from typing import Any

from receipts.receipt.api_facts import ApiFacts, PaymentMethod
from receipts.receipt.rendering import Renderer
from tests import stripe_events
from tests.receipt_examples import VISA, email, example, invoice_of, renderer

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


def test_a_sellers_tax_id_known_only_by_id_points_to_the_invoice_without_a_key() -> None:
    """account_tax_ids as txi_… and no API key: the receipt does not leave the seller's tax
    id out as if there were none, nor prints the id; it says where the value is."""
    text = email(example("invoice_paid_connect_eur"))["text"]
    assert "Your tax ID: VAT DE123456789\nSeller's tax ID: shown on the invoice\n" in text
    assert "txi_" not in text
    french = email(example("invoice_paid_connect_eur"), renderer("fr_FR"))["text"]
    assert "N° fiscal du vendeur : indiqué sur la facture" in french


def test_a_tax_id_reads_after_its_kind_in_the_readers_language() -> None:
    ids = [{"type": "eu_vat", "value": "DE123456789"}, {"type": "us_ein", "value": "12-3456789"},
           {"type": "br_cnpj", "value": "01.234.456/5432-10"}]  # fmt: skip
    event = stripe_events.event(stripe_events.invoice(customer_tax_ids=ids))
    assert (
        "Your tax ID: VAT DE123456789, EIN 12-3456789, 01.234.456/5432-10\n"
        in (email(event)["text"])
    )
    html = email(event, renderer("de_DE"))["html"]
    # a phone may break between a name and its number, but not inside "USt-IdNr."
    assert "USt-\u2060IdNr. DE123456789, EIN 12-3456789" in html
    assert "\u2060" not in email(event, renderer("de_DE"))["text"]


def test_a_line_named_by_the_api_keeps_the_payloads_own_product_name_first() -> None:
    """An expanded product wins over a looked-up name; a nickname comes last."""
    expanded = {"amount": 1999, "description": None, "price": {"product": {"name": "Desk lamp"}}}
    by_id = {"amount": 1000, "description": None,
             "price": {"product": "prod_1Shade", "nickname": "shade-internal"}}  # fmt: skip
    lines = {"object": "list", "data": [expanded, by_id], "has_more": False}
    event = stripe_events.event(
        stripe_events.invoice(lines=lines, amount_paid=2999, total=2999, subtotal=2999)
    )
    facts = ApiFacts(product_names=(("prod_1Shade", "Linen shade"), ("prod_1Lamp", "Wrong")))
    text = email(event, api_facts=facts)["text"]
    assert "- Desk lamp: $19.99\n- Linen shade: $10.00\n" in text
    assert "- shade-internal: $10.00\n" in email(event)["text"]


def test_a_basil_invoice_that_lists_a_payment_made_outside_stripe_says_it_was_marked_paid() -> None:
    """An invoice retrieved with its payments expanded (no key needed): the payment record
    processed outside Stripe is marked as paid, the rest was charged."""
    invoice = invoice_of("invoice_paid_out_of_band_basil")
    record = {
        "id": "pr_1Wire",
        "object": "payment_record",
        "processor_details": {"type": "custom", "custom": {"payment_reference": "W-1"}},
    }
    card = {"latest_charge": {"payment_method_details": {
        "type": "card", "card": {"brand": "visa", "last4": "4242"}}}}  # fmt: skip
    invoice["payments"] = {"object": "list", "has_more": False, "data": [
        {"status": "paid", "amount_paid": 8000,
         "payment": {"type": "payment_record", "payment_record": record}},
        {"status": "paid", "amount_paid": 2800,
         "payment": {"type": "payment_intent", "payment_intent": card}},
    ]}  # fmt: skip
    text = email(stripe_events.event(invoice))["text"]
    assert "Marked as paid by Acme Tools, Inc.: -$80.00\nAmount charged: $28.00\n" in text
    stated = invoice_of("invoice_paid_out_of_band_basil") | {"amount_paid_off_stripe": 10800}
    assert "Amount charged: $0.00\n" in email(stripe_events.event(stated))["text"]
