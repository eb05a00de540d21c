"""What a receipt says, read from invoices of every API version in use."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest

from receipts.receipt.api_facts import ApiFacts, PaymentMethod
from receipts.receipt.derivation import UnsendableReceipt
from receipts.receipt.invoice_facts import MAX_LINES_SHOWN, read_invoice
from receipts.receipt.invoice_totals import Discount, Tax
from receipts.receipt.presentation import TIMES
from tests import stripe_events
from tests.receipt_examples import VISA, derive, email, example, invoice_of, job, renderer


def facts_of(name: str) -> Any:
    invoice = invoice_of(name)
    return read_invoice(invoice["id"], invoice, None)


def test_a_2024_subscription_update_lists_prorations_coupon_and_tax() -> None:
    """2024-06-20: proration flag on the line, the legacy discount names the coupon, tax rates."""
    facts = facts_of("invoice_paid_subscription_update")
    assert [(line.amount, line.proration, line.quantity) for line in facts.lines] == [
        (-950, True, None),
        (4900, True, Decimal(2)),
        (9800, False, Decimal(2)),
    ]
    assert facts.lines[0].description == "Unused time on Starter after 15 Nov 2025"
    assert facts.discounts == (
        Discount(name="Launch offer", percent_off=Decimal("20.0"), amount=1960),
    )
    assert facts.taxes == (
        Tax(
            name="Sales tax \u2013 NY",
            percentage=Decimal("8.875"),
            inclusive=False,
            reverse_charge=False,
            amount=1047,
        ),
    )
    assert (facts.subtotal, facts.total, facts.amount_paid) == (13750, 12837, 12837)
    assert facts.merchant == "Acme Tools, Inc." and facts.number == "ACME-0043"


def test_credit_balance_says_what_it_paid_and_what_was_charged() -> None:
    """starting_balance -400, ending_balance 0: $10.00 invoice, $4.00 credit, $6.00 charged."""
    text = email(example("invoice_paid_credit_balance"))["text"]
    assert (
        "Your invoice ACME-0051 for $10.00 is paid: $4.00 from your credit balance, $6.00 charged."
        in text
    )
    assert "From your credit balance: -$4.00" in text and "Amount charged: $6.00" in text


def test_a_balance_the_customer_owed_is_shown_as_added() -> None:
    """A positive starting balance is a debt carried into this invoice."""
    invoice = stripe_events.invoice(
        total=1000, amount_paid=1300, starting_balance=300, ending_balance=0
    )
    facts = read_invoice(invoice["id"], invoice, None)
    assert (facts.previous_balance, facts.credit_applied) == (300, 0)
    assert "Previous balance: $3.00" in email(stripe_events.event(invoice))["text"]


def test_basil_and_later_read_proration_and_taxes_from_their_new_places() -> None:
    """2025-03-31.basil moved proration under parent.*_details and taxes to total_taxes."""
    invoice = invoice_of("invoice_paid_jpy")
    invoice["lines"]["data"][1]["parent"]["invoice_item_details"]["proration"] = True
    facts = read_invoice(invoice["id"], invoice, None)
    assert [line.proration for line in facts.lines] == [False, True]
    assert [line.quantity for line in facts.lines] == [Decimal(3), None]
    assert facts.taxes == (
        Tax(
            name="消費税",
            percentage=Decimal("10.0"),
            inclusive=True,
            reverse_charge=False,
            amount=3673,
        ),
    )


def test_reverse_charge_and_a_discount_known_only_by_id() -> None:
    """Dahlia, Connect: the coupon is an id (so "Discount"), VAT reverse charged at 0."""
    payload = email(example("invoice_paid_connect_eur"), renderer("de_DE"))
    text = payload["text"]
    assert "Rabatt: -240,00 €" in text  # the text part spaces in ASCII
    assert "Steuer (Steuerschuldnerschaft des Leistungsempfängers): 0,00 €" in text
    assert "Rabatt</td>" in payload["html"] and "-240,00\xa0€" in payload["html"]
    key = job(example("invoice_paid_connect_eur")).message_key
    assert key == "acct_1TExampleAtelier/test/in_1TExampleAtelier001/invoice-paid"
    assert "Atelier Dubois" in payload["subject"]


def test_a_2019_invoice_reads_tax_percent_and_the_single_discount() -> None:
    """2019-03-14: bare `tax` with `tax_percent`, the `discount` object, a plan nickname."""
    facts = facts_of("invoice_paid_2019")
    assert facts.taxes == (
        Tax(
            name=None, percentage=Decimal("20.0"), inclusive=False, reverse_charge=False, amount=180
        ),
    )
    assert facts.discounts == (Discount(name="Loyal customer", percent_off=None, amount=300),)
    assert facts.lines[0].description == "Maps Pro (monthly)"


def test_hosted_invoice_on_pay_stripe_com_is_accepted() -> None:
    """Invoices from 2019-2020 link to pay.stripe.com; they are receipts, not review rows."""
    assert "https://pay.stripe.com/invoice/invst_" in email(example("invoice_paid_2019"))["text"]


def test_clover_discount_names_its_coupon_under_source() -> None:
    """From 2025-09-30.clover an expanded discount carries its coupon at source.coupon."""
    discount = {
        "id": "di_1",
        "object": "discount",
        "source": {"type": "coupon", "coupon": {"id": "X", "name": "Spring", "percent_off": 15}},
    }
    invoice = stripe_events.invoice(
        subtotal=2000,
        total=1700,
        discounts=[discount],
        total_discount_amounts=[{"amount": 300, "discount": "di_1"}],
    )
    facts = read_invoice(invoice["id"], invoice, None)
    assert facts.discounts == (Discount(name="Spring", percent_off=Decimal(15), amount=300),)


def test_credit_grants_are_listed_but_pretax_discounts_are_not_counted_twice() -> None:
    """total_pretax_credit_amounts repeats discounts; only its credit grants are added."""
    invoice = stripe_events.invoice(
        total_discount_amounts=[{"amount": 100, "discount": "di_1"}],
        total_pretax_credit_amounts=[
            {"amount": 100, "discount": "di_1", "type": "discount"},
            {
                "amount": 250,
                "credit_balance_transaction": "cbtxn_1",
                "type": "credit_balance_transaction",
            },
        ],
    )
    facts = read_invoice(invoice["id"], invoice, None)
    assert [(d.amount, d.credit) for d in facts.discounts] == [(100, False), (250, True)]


def lines_payload(count: int, *, has_more: bool, total_count: int | None = None) -> dict[str, Any]:
    data = [{"amount": 100, "description": f"Seat {n}", "quantity": 1} for n in range(count)]
    listing: dict[str, Any] = {"object": "list", "data": data, "has_more": has_more}
    if total_count is not None:
        listing["total_count"] = total_count
    return listing


def test_a_truncated_line_list_says_how_many_more_the_invoice_has() -> None:
    """lines.has_more: the lines given, then "and N more" (N from total_count when present)."""
    counted = stripe_events.invoice(lines=lines_payload(10, has_more=True, total_count=14))
    text = email(stripe_events.event(counted))["text"]
    assert "Seat 9: $1.00" in text and "and 4 more items on the invoice" in text
    uncounted = stripe_events.invoice(lines=lines_payload(10, has_more=True))
    assert "and more items on the invoice" in email(stripe_events.event(uncounted))["text"]


def test_lines_fetched_from_the_api_replace_a_truncated_list() -> None:
    """With every line looked up, the receipt lists them all and says nothing is missing."""
    invoice = stripe_events.invoice(lines=lines_payload(10, has_more=True))
    fetched = lines_payload(14, has_more=False)["data"]
    facts = read_invoice(invoice["id"], invoice, None, all_lines=fetched)
    assert [line.description for line in facts.lines][-1] == "Seat 13"
    assert (facts.more_lines, facts.lines_truncated) == (None, False)


def test_a_very_long_line_list_is_cut_with_the_count_of_the_rest() -> None:
    """An email lists at most MAX_LINES_SHOWN lines; the fingerprint still has them all."""
    invoice = stripe_events.invoice(lines=lines_payload(MAX_LINES_SHOWN + 5, has_more=False))
    text = email(stripe_events.event(invoice))["text"]
    assert f"Seat {MAX_LINES_SHOWN - 1}: $1.00" in text
    assert f"Seat {MAX_LINES_SHOWN}:" not in text
    assert "and 5 more items on the invoice" in text


def test_paid_time_is_shown_in_the_merchants_time_zone() -> None:
    """RECEIPTS_TIMEZONE: 1764460800 is midnight UTC and 7 pm the day before in New York."""
    invoice = stripe_events.invoice(status_transitions={"paid_at": 1764460800})
    utc = email(stripe_events.event(invoice))["text"]
    new_york = email(stripe_events.event(invoice), renderer("en_US", "America/New_York"))
    assert "Paid on: November 30, 2025, 12:00 AM UTC" in utc
    assert "Paid on: November 29, 2025, 7:00 PM EST" in new_york["text"]


def test_payment_method_and_language_come_from_the_api_facts() -> None:
    """ "Visa ending in 4242"; the first preferred locale with a catalog beats RECEIPTS_LOCALE."""
    event = example("invoice_paid")
    english = email(event, api_facts=VISA)["text"]
    assert "Payment method: Visa ending in 4242" in english
    facts = ApiFacts(
        payment_method=PaymentMethod(kind="sepa_debit", last4="3000"),
        preferred_locales=("nl-NL", "fr-CA", "de"),
    )
    french = email(event, api_facts=facts)
    assert "Moyen de paiement : Prélèvement SEPA se terminant par 3000" in french["text"]
    assert french["subject"].startswith("Reçu de Acme Tools, Inc.")
    assert "49,00\xa0$" in french["html"]  # fr_CA formats dollars its own way


def test_without_api_facts_there_is_no_payment_method_line() -> None:
    """The invoice payload does not say how it was paid; the receipt does not guess."""
    payload = email(example("invoice_paid"))
    assert "Payment method" not in payload["text"] and "Payment method" not in payload["html"]


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        (("amount_paid",), 10**28, "invalid_amount_paid"),
        (("total",), 10**28, "invalid_invoice_amounts"),
        (("subtotal",), "4900", "invalid_invoice_amounts"),
        (("lines", "data", 0, "amount"), 1.5, "invalid_invoice_amounts"),
        (("starting_balance",), True, "invalid_invoice_amounts"),
        (("total_discount_amounts",), [{"amount": 10**20}], "invalid_invoice_amounts"),
        (
            ("total_taxes",),
            [{"amount": None, "tax_behavior": "exclusive"}],
            "invalid_invoice_amounts",
        ),
    ],
)
def test_amounts_stripe_cannot_send_put_the_invoice_in_review(
    path: tuple[Any, ...], value: Any, reason: str
) -> None:
    """An absurd or mistyped amount is a review row with its reason, never a 500."""
    event = example("invoice_paid")
    target = event["data"]["object"]
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    decision = derive(event)
    assert isinstance(decision, UnsendableReceipt) and decision.reason == reason


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example\\@invoice.stripe.com/i/x",
        "https://evil.example@invoice.stripe.com/i/x",
        "https://invoice.stripe.com:8443/i/x",
        "https://invoice.stripe.com/i/x\n/evil",
        "https://invoice.stripe.com.evil.example/i/x",
    ],
)
def test_links_a_browser_would_read_differently_go_to_review(url: str) -> None:
    """A hosted link must be https on Stripe's host and read the same by every parser."""
    decision = derive(stripe_events.event(stripe_events.invoice(hosted_invoice_url=url)))
    assert isinstance(decision, UnsendableReceipt)
    assert decision.reason == "invalid_hosted_invoice_url"


def test_display_fields_are_one_line_without_direction_overrides() -> None:
    """A newline or a right-to-left override typed into a name cannot shape the email."""
    invoice = stripe_events.invoice(
        customer_name="Jenny\n\nURGENT: refund at https://evil.example",
        account_name="Acme\u202e moc.live\u202c",
        number="N-1\r\nBcc: x@evil.example",
        lines={
            "object": "list",
            "data": [{"amount": 1999, "description": "Plan\u2028second line\x00", "quantity": 1}],
            "has_more": False,
        },
    )
    payload = email(stripe_events.event(invoice))
    assert "Hello Jenny URGENT: refund at https://evil.example," in payload["text"]
    assert "- Plan second line: $19.99" in payload["text"]
    for part in ("subject", "text", "html"):
        assert "\u202e" not in payload[part] and "\x00" not in payload[part]
        assert "\r" not in payload[part] and "\u2028" not in payload[part]
    assert payload["subject"] == "Receipt from Acme moc.live for invoice N-1 Bcc: x@evil.example"


def test_every_value_in_the_html_is_escaped() -> None:
    """Customer names, line descriptions and coupon names are untrusted."""
    hostile = '<img src="https://evil.example/x.png">&'
    invoice = stripe_events.invoice(
        customer_name=hostile,
        account_name=hostile,
        discount={"object": "discount", "coupon": {"name": hostile}},
        subtotal=2999,
        total=1999,
        lines={
            "object": "list",
            "data": [{"amount": 2999, "description": hostile, "quantity": 3}],
            "has_more": False,
        },
    )
    html = email(stripe_events.event(invoice))["html"]
    assert "<img" not in html
    assert html.count("&lt;img src=&#34;https://evil.example/x.png&#34;&gt;&amp;") >= 4


def test_the_html_loads_nothing_and_runs_nothing() -> None:
    """Tables and inline styles only: no stylesheet, font, image, script or remote URL."""
    for name in ("invoice_paid_subscription_update", "invoice_paid_jpy"):
        html = email(example(name), api_facts=VISA)["html"].lower()
        for banned in ("<style", "<link", "<script", "<img", "src=", "url(", "@import", "<iframe"):
            assert banned not in html, (name, banned)
        assert "<table" in html and 'style="' in html


def test_unused_time_credits_are_negative_and_marked() -> None:
    """A negative proration line is shown as a credit, not as a charge."""
    text = email(example("invoice_paid_subscription_update"))["text"]
    assert "- Unused time on Starter after 15 Nov 2025: -$9.50 (credit)" in text


def test_quantity_is_shown_once() -> None:
    """Stripe's own "2 x Pro" descriptions (with a times sign) get no second quantity."""
    text = email(example("invoice_paid_subscription_update"))["text"]
    assert f"- 2 {TIMES} Pro (at $49.00 / month): $98.00" in text
    assert f"2 {TIMES} 2 {TIMES}" not in text and f"2 {TIMES} Remaining" not in text
    plain = stripe_events.invoice(
        lines={"object": "list", "data": [{"amount": 600, "description": "Seat", "quantity": 3}]},
        total=600,
        amount_paid=600,
    )
    assert f"- 3 {TIMES} Seat: $6.00" in email(stripe_events.event(plain))["text"]


def test_an_invoice_without_optional_fields_is_still_a_receipt() -> None:
    """Only the email, link, amount paid and currency are needed; the rest is left out."""
    bare = {
        key: value
        for key, value in stripe_events.invoice(number=None, customer_name=None).items()
        if key
        in (
            "id",
            "object",
            "status",
            "customer_email",
            "hosted_invoice_url",
            "amount_paid",
            "currency",
        )
    }
    payload = email(stripe_events.event(copy.deepcopy(bare)), from_address="billing@example.com")
    assert payload["subject"] == f"Receipt for invoice {bare['id']}"
    assert "Thank you! Your payment of $19.99 has been received." in payload["text"]
