"""Every example's receipt, text and HTML, compared with the files under tests/golden/.

A deliberate change to the templates, catalogs or formatting is recorded with
``RECEIPTS_UPDATE_GOLDEN=1 pytest tests/unit/test_golden.py`` and reviewed in
the diff. Independently of those files, each receipt is checked for every
line, amount and total its invoice carries, in the currency's format.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

import pytest

from receipts.receipt.api_facts import ApiFacts, PaymentMethod
from receipts.receipt.money import format_amount
from tests.receipt_examples import VISA, email, example, example_names, invoice_of, renderer

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
SEPA = ApiFacts(payment_method=PaymentMethod(kind="sepa_debit", last4="3000"))
# (example, locale, API facts): every example in English, some in their customer's language.
CASES: list[tuple[str, str, ApiFacts | None]] = [
    *[(name, "en_US", None) for name in example_names()],
    ("invoice_paid_subscription_update", "de_DE", VISA),
    ("invoice_paid_jpy", "ja_JP", VISA),
    ("invoice_paid_connect_eur", "fr_FR", SEPA),
    ("invoice_paid_credit_balance", "es_ES", VISA),
    ("invoice_paid_2019", "pt_BR", None),
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
    """Every amount the invoice itself states, formatted for en_US straight from the payload."""
    currency = invoice["currency"]
    raw = [line["amount"] for line in invoice["lines"]["data"]]
    raw += [invoice["subtotal"], invoice["total"], invoice["amount_paid"]]
    raw += [-entry["amount"] for entry in invoice.get("total_discount_amounts") or []]
    raw += [entry["amount"] for entry in invoice.get("total_taxes") or []]
    raw += [entry["amount"] for entry in invoice.get("total_tax_amounts") or []]
    if invoice.get("tax") and not invoice.get("total_tax_amounts"):
        raw.append(invoice["tax"])
    return [format_amount(amount, currency, "en_US") for amount in raw]


@pytest.mark.parametrize("name", example_names())
def test_both_parts_carry_every_line_and_total(name: str) -> None:
    """Every line description and amount, subtotal, discounts, taxes, total, in both parts."""
    invoice = invoice_of(name)
    payload = rendered(name, "en_US", None)
    descriptions = [line["description"] for line in invoice["lines"]["data"] if line["description"]]
    for value in [*descriptions, *expected_amounts(invoice)]:
        assert value in payload["text"], (name, value)
        assert html.escape(value, quote=False) in payload["html"], (name, value)
    for label in ("Subtotal", "Total", "Amount paid"):
        assert label in payload["text"] and label in payload["html"]


def test_credit_balance_receipt_shows_credit_and_charge_in_both_parts() -> None:
    """Never "invoice for $6.00": the $10.00 invoice, $4.00 of credit, $6.00 charged."""
    payload = rendered("invoice_paid_credit_balance", "en_US", None)
    sentence = (
        "Your invoice ACME-0051 for $10.00 is paid: $4.00 from your credit balance, $6.00 charged."
    )
    for part in ("text", "html"):
        assert sentence in payload[part]
        assert "From your credit balance" in payload[part] and "-$4.00" in payload[part]
