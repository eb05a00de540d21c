"""Every example's receipt, text and HTML, compared with the files under tests/golden/.

A deliberate change to the templates, catalogs or formatting is recorded with
``RECEIPTS_UPDATE_GOLDEN=1 pytest tests/unit/test_golden.py`` and reviewed in
the diff: every number in them was added up by hand when they were recorded,
and ``test_receipts_add_up.py`` adds them up again on every run.
Independently of those files, each receipt is checked for every line, tax,
total and amount paid its invoice carries, in the currency's format.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

import pytest

from receipts.receipt.api_facts import ApiFacts, PaymentMethod, TaxId
from receipts.receipt.money import format_amount, receipt_digits
from receipts.receipt.rendering import ascii_spaces
from tests.receipt_examples import VISA, email, example, example_names, invoice_of, renderer

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
SEPA = ApiFacts(payment_method=PaymentMethod(kind="sepa_debit", last4="3000"))
# What the API adds to the basil out-of-band example: the payment recorded outside
# Stripe, and the merchant's tax id the event names only by id.
MARKED_PAID = ApiFacts(
    paid_off_stripe=10800, merchant_tax_ids=(TaxId(kind="us_ein", value="12-3456789"),)
)
# (example, locale, API facts): every example in English, some in their customer's language.
CASES: list[tuple[str, str, ApiFacts | None]] = [
    *[(name, "en_US", None) for name in example_names()],
    ("invoice_paid_subscription_update", "de_DE", VISA),
    ("invoice_paid_jpy", "ja_JP", VISA),
    ("invoice_paid_connect_eur", "fr_FR", SEPA),
    ("invoice_paid_credit_balance", "es_ES", VISA),
    ("invoice_paid_2019", "pt_BR", None),
    ("invoice_paid_tax_two_discounts", "de_DE", VISA),
    ("invoice_paid_out_of_band", "fr_FR", None),
    ("invoice_paid_credit_full", "ja_JP", None),
    ("invoice_paid_huf", "pt_BR", VISA),
    ("invoice_paid_out_of_band_basil", "de_DE", MARKED_PAID),
]


def rendered(name: str, locale: str, facts: ApiFacts | None) -> dict[str, Any]:
    return email(example(name), renderer(locale), api_facts=facts)


def check_golden(path: Path, actual: str) -> None:
    if os.environ.get("RECEIPTS_UPDATE_GOLDEN"):
        path.write_text(actual, encoding="utf-8")
    assert path.read_text(encoding="utf-8") == actual, f"{path.name} differs"


@pytest.mark.parametrize(("name", "locale", "facts"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_receipt_matches_its_golden_files(name: str, locale: str, facts: ApiFacts | None) -> None:
    """Subject and text in ``.txt``, the HTML part in ``.html``."""
    payload = rendered(name, locale, facts)
    check_golden(
        GOLDEN / f"{name}.{locale}.txt", f"Subject: {payload['subject']}\n\n{payload['text']}"
    )
    check_golden(GOLDEN / f"{name}.{locale}.html", payload["html"])


def expected_amounts(invoice: dict[str, Any]) -> list[str]:
    """Every line, tax, the total and the amount paid, formatted for en_US from the payload.

    Discounts are left out: two rows for one coupon are shown as one.
    """
    currency = invoice["currency"]
    raw = [line["amount"] for line in invoice["lines"]["data"]]
    raw += [invoice["total"], invoice["amount_paid"]]
    raw += [entry["amount"] for entry in invoice.get("total_taxes") or []]
    raw += [entry["amount"] for entry in invoice.get("total_tax_amounts") or []]
    if invoice.get("tax") and not invoice.get("total_tax_amounts"):
        raw.append(invoice["tax"])
    digits = receipt_digits(currency, raw)
    return [format_amount(amount, currency, "en_US", digits=digits) for amount in raw]


@pytest.mark.parametrize("name", example_names())
def test_both_parts_carry_every_line_and_total(name: str) -> None:
    """Every line description and amount, each tax, total and amount paid, in both parts."""
    invoice = invoice_of(name)
    payload = rendered(name, "en_US", None)
    descriptions = [line["description"] for line in invoice["lines"]["data"] if line["description"]]
    for value in [*descriptions, *expected_amounts(invoice)]:
        assert ascii_spaces(value) in payload["text"], (name, value)
        assert html.escape(value, quote=False) in payload["html"], (name, value)
    final = "Amount charged" if invoice["amount_paid"] < invoice["total"] else "Amount paid"
    assert final in payload["text"] and final in payload["html"]


def test_credit_balance_receipt_shows_credit_and_charge_in_both_parts() -> None:
    """Never "invoice for $6.00": the $10.00 invoice, $4.00 of credit, $6.00 charged."""
    payload = rendered("invoice_paid_credit_balance", "en_US", None)
    sentence = (
        "Your invoice ACME-0051 for $10.00 is paid: $4.00 from your credit balance, $6.00 charged."
    )
    # The HTML keeps the invoice number from breaking at its hyphen.
    nowrap = '<span style="white-space:nowrap;">ACME-0051</span>'
    for part, number in (("text", "ACME-0051"), ("html", nowrap)):
        assert sentence.replace("ACME-0051", number) in payload[part]
        assert "From your credit balance" in payload[part] and "-$4.00" in payload[part]
