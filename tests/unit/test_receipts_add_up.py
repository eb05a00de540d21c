"""Every receipt adds up: read back from its text part, row by row, as a customer would.

The examples (recorded shapes of real invoices: a line-item coupon, tax with
two discounts, credit balance in full and in part, out of band, JPY, KWD,
HUF with fractions, a 100 % coupon) and 100 generated invoices (random lines,
line-item and invoice discounts, taxes included or added, credit balance,
currencies with 0, 2 and 3 decimals) are rendered, parsed back
(``tests/receipt_arithmetic.py``) and added up; a receipt that would not add
up is refused with its numbers.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from receipts.receipt.payload import render_payload
from receipts.receipt.presentation import TIMES
from receipts.receipt.statement import ReceiptDoesNotAddUp
from tests import stripe_events
from tests.receipt_arithmetic import check_adds_up, decimals_printed, read_text_part
from tests.receipt_examples import email, example, example_names, invoice_of, job, renderer


@pytest.mark.parametrize("name", example_names())
def test_every_example_adds_up_as_printed(name: str) -> None:
    """Lines to subtotal, discounts and taxes to the total, balance to the amount paid."""
    invoice = invoice_of(name)
    text = email(example(name))["text"]
    read = read_text_part(text, invoice["currency"])
    check_adds_up(read, total=invoice["total"], amount_paid=invoice["amount_paid"])
    assert len(decimals_printed(read)) == 1, "one receipt, one number of decimals"


def test_a_coupon_on_one_line_is_taken_off_once() -> None:
    """Stripe's subtotal ($9.50) already has the line's 50 % off: the receipt starts at $19.00."""
    text = email(example("invoice_paid_line_coupon"))["text"]
    assert "- Walnut desk organizer: $19.00\n\nSubtotal: $19.00\n" in text
    assert "\nHalf Off (50% off): -$9.50\nAmount paid: $9.50\n" in text
    assert "Subtotal: $9.50" not in text


def test_two_discounts_and_a_tax_reach_the_total() -> None:
    """$261.00 - $25.23 - $8.70 + $18.05 = $245.12, the total. The coupon on the invoice
    and the same coupon on one item stay two rows, each 10 % of something shown."""
    text = email(example("invoice_paid_tax_two_discounts"))["text"]
    assert (
        "Subtotal: $261.00\n10% Off: -$25.23\n10% Off: -$8.70\nTax: $18.05\nAmount paid: $245.12\n"
    ) in text
    assert "(10% off)" not in text


def test_a_cut_short_item_list_with_a_coupon_on_items_still_adds_up() -> None:
    """Without every line (``has_more``, no API key) the subtotal is Stripe's plus the
    item discounts; a coupon on items must count there even when its rows are merged."""
    event = example("invoice_paid_tax_two_discounts")
    invoice = event["data"]["object"]
    invoice["lines"]["has_more"] = True
    # Both discounts on items (the coupon on two line items): Stripe's subtotal has
    # both taken off already; the total and the tax stay as they were.
    item_coupon = invoice["total_discount_amounts"][1]["discount"]
    for entry in invoice["total_discount_amounts"]:
        entry["discount"] = item_coupon
    invoice["discounts"] = []
    invoice["subtotal"] = invoice["subtotal_excluding_tax"] = 26100 - 2523 - 870
    text = email(event)["text"]
    assert "and more items on the invoice" in text
    assert "Subtotal: $261.00\n10% Off: -$33.93\nTax: $18.05\n" in text


def test_kwd_and_huf_keep_their_decimals_and_a_space_after_the_code() -> None:
    kwd = email(example("invoice_paid_kwd"))["text"]
    assert f"- 2 {TIMES} Ergonomic chair: KWD 12.340" in kwd and "Amount paid: KWD 13.915" in kwd
    huf = email(example("invoice_paid_huf"))["text"]
    assert "HUF 12,500.00" in huf and "HUF 137.50" in huf and "HUF 16,049.63" in huf
    assert not code_against_number(kwd + huf)


def code_against_number(text: str) -> bool:
    """A currency code run into its digits ("KWD12.340"), links left out."""
    shown = "\n".join(line for line in text.splitlines() if "https://" not in line)
    return re.search(r"\b[A-Z]{3}\d", shown) is not None


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"total": 24500}, "= 24512, but the total is 24500"),
        ({"amount_paid": 24000}, "but the amount paid is 24000"),
    ],
)
def test_a_receipt_that_would_not_add_up_is_refused_with_its_numbers(
    change: dict[str, int], detail: str
) -> None:
    """Never sent: the worker sends it to review as receipt_does_not_add_up, numbers only."""
    event = example("invoice_paid_tax_two_discounts")
    event["data"]["object"].update(change)
    receipt = job(event)
    with pytest.raises(ReceiptDoesNotAddUp) as refused:
        render_payload(receipt.message_key, receipt.render_input, renderer())
    assert refused.value.reason == "receipt_does_not_add_up"
    assert detail in str(refused.value.detail)
    assert "@" not in str(refused.value.detail) and "https" not in str(refused.value.detail)


# --- generated invoices -------------------------------------------------------------

CURRENCIES = {"usd": 2, "eur": 2, "jpy": 0, "kwd": 3, "huf": 2}


@st.composite
def invoices(draw: st.DrawFn) -> dict[str, Any]:
    """An invoice as Stripe computes one: line discounts first, then invoice discounts, tax."""
    currency = draw(st.sampled_from(sorted(CURRENCIES)))
    count = draw(st.integers(1, 4))
    amounts = [draw(st.integers(1, 2_000_000)) for _ in range(count)]
    if draw(st.booleans()):
        amounts.append(-draw(st.integers(1, min(amounts))))  # unused time, a credit
    # A few percentages and one shared coupon name come up often, so that rows of
    # one coupon (on items, on the invoice, or both) have to be merged or kept apart.
    percents = st.sampled_from([10, 50]) | st.integers(1, 100)
    shared_name = draw(st.sampled_from([None, "Sale"]))
    line_discounts = [
        (index, draw(percents))
        for index, value in enumerate(amounts)
        if value > 0 and draw(st.booleans())
    ]
    item_off = [value * percent // 100 for index, percent in line_discounts
                for value in [amounts[index]]]  # fmt: skip
    subtotal = sum(amounts) - sum(item_off)
    invoice_percents = draw(st.lists(st.sampled_from([10, 50]) | st.integers(1, 50), max_size=2))
    invoice_off = []
    base = subtotal
    for percent in invoice_percents:
        invoice_off.append(max(base, 0) * percent // 100)
        base -= invoice_off[-1]
    inclusive = draw(st.booleans())
    rate = draw(st.sampled_from([0, 5, 8.875, 19, 27]))
    tax = round(max(base, 0) * rate / (100 + rate if inclusive else 100))
    total = base + (0 if inclusive else tax)
    credit = draw(st.integers(0, max(total, 0) + 500)) if draw(st.booleans()) else 0
    used = min(credit, max(total, 0))
    # A negative total becomes credit; what credit pays is not charged.
    ending = -(credit - used) + min(total, 0)
    discounts = [
        *({"amount": off, "discount": {"id": f"di_line{n}", "object": "discount",
           "invoice_item": f"ii_{n}", "coupon": {"name": shared_name or f"Line {n}",
                                                  "percent_off": p}}}
          for n, (off, (_, p)) in enumerate(zip(item_off, line_discounts, strict=True))),
        *({"amount": off, "discount": {"id": f"di_inv{n}", "object": "discount",
           "coupon": {"name": shared_name or f"Offer {n}", "percent_off": p}}}
          for n, (off, p) in enumerate(zip(invoice_off, invoice_percents, strict=True))),
    ]  # fmt: skip
    listed = [
        {"amount": value, "description": f"Line {n}", "quantity": 1}
        for n, value in enumerate(amounts)
    ]
    # A long invoice's event carries only its first lines (no API key to fetch more).
    cut_short = len(listed) > 1 and draw(st.booleans())
    return stripe_events.invoice(
        currency=currency,
        lines={
            "object": "list",
            "has_more": cut_short,
            "data": listed[:-1] if cut_short else listed,
        },
        subtotal=subtotal,
        discounts=[f"di_inv{n}" for n in range(len(invoice_off))],
        total_discount_amounts=[entry for entry in discounts if entry["amount"]],
        total_taxes=[
            {
                "amount": tax,
                "tax_behavior": "inclusive" if inclusive else "exclusive",
                "tax_rate_details": None,
                "taxability_reason": "standard_rated",
            }
        ]
        if rate
        else [],
        total=total,
        starting_balance=-credit,
        ending_balance=ending,
        amount_paid=max(total, 0) - used,
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(invoices())
def test_generated_invoices_add_up_and_keep_one_format(invoice: dict[str, Any]) -> None:
    """Whatever the discounts, taxes, credit and currency, the printed rows add up."""
    payload = email(stripe_events.event(copy.deepcopy(invoice)))
    read = read_text_part(payload["text"], invoice["currency"])
    check_adds_up(read, total=invoice["total"], amount_paid=invoice["amount_paid"])
    assert decimals_printed(read) <= {CURRENCIES[invoice["currency"]], 0}
    assert len(decimals_printed(read)) == 1
    assert not code_against_number(payload["text"])
    assert "\u00a0" not in payload["text"] and "\u202f" not in payload["text"]


@settings(max_examples=30, deadline=None)
@given(invoices(), st.integers(-500, 500).filter(bool))
def test_a_generated_invoice_whose_total_is_off_is_refused(
    invoice: dict[str, Any], off_by: int
) -> None:
    """Off by any amount, the rows cannot reach Stripe's total: refused, never rendered."""
    invoice["total"] += off_by
    with pytest.raises(ReceiptDoesNotAddUp):
        email(stripe_events.event(invoice))


def test_a_2020_invoice_with_vat_included_and_the_bare_tax_set_adds_it_once() -> None:
    """2020-08-27: `tax` repeats an inclusive rate of `total_tax_amounts`; neither is added."""
    vat = {"id": "txr_1Vat", "object": "tax_rate", "display_name": "VAT", "inclusive": True,
           "jurisdiction": "IE", "percentage": 15.0}  # fmt: skip
    taxed = [{"amount": 522, "inclusive": True, "tax_rate": "txr_1Vat"}]
    line = {"amount": 4000, "description": "Silver plan", "quantity": 1,
            "tax_amounts": taxed, "tax_rates": [vat]}  # fmt: skip
    invoice = stripe_events.invoice(
        subtotal=4000,
        total=4000,
        amount_paid=4000,
        tax=522,
        tax_percent=None,
        total_tax_amounts=taxed,
        lines={"object": "list", "has_more": False, "data": [line]},
    )
    text = email(stripe_events.event(invoice))["text"]
    check_adds_up(read_text_part(text, "usd"), total=4000, amount_paid=4000)
    assert "Amount paid: $40.00\nVAT \u2013 IE (15% incl.): $5.22\n" in text
