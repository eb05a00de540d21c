"""Facts about an invoice that only Stripe's API has, for a richer receipt.

An ``invoice.paid`` payload seldom carries the payment method (only an id,
unless the sender expanded it), never the charge's receipt number nor the
customer's preferred languages; it names the merchant's tax ids
(``account_tax_ids``) and a line's product only by id, and since
2025-03-31.basil it no longer says that a payment was made outside Stripe.
When a Stripe API key is configured, ingest looks them up and passes them to
:func:`receipts.receipt.derivation.derive_receipt`, which stores them with
the receipt's render input (bounded: :data:`MAX_TAX_IDS`,
:data:`MAX_PRODUCTS`); without a key, or when a look-up fails, the receipt is
made without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# At most this many of the merchant's tax ids and product names are looked up
# and stored for one invoice (an invoice names a handful of each).
MAX_TAX_IDS = 5
MAX_PRODUCTS = 20


@dataclass(frozen=True, kw_only=True)
class PaymentMethod:
    """How the customer paid, as a receipt may show it ("Visa ending 4242")."""

    kind: str  # Stripe's payment method type: card, sepa_debit, us_bank_account, …
    brand: str | None = None  # card brand (visa, mastercard, …) or bank name
    last4: str | None = None


@dataclass(frozen=True, kw_only=True)
class TaxId:
    """A tax id as a receipt shows it: Stripe's type (eu_vat, us_ein, …) and its value."""

    kind: str | None
    value: str


@dataclass(frozen=True, kw_only=True)
class Payment:
    """A payment of the invoice: how it was made, and the receipt number Stripe gave it."""

    method: PaymentMethod | None = None
    receipt_number: str | None = None


@dataclass(frozen=True, kw_only=True)
class ApiFacts:
    """What the API added; every field may be missing."""

    payment_method: PaymentMethod | None = None
    receipt_number: str | None = None  # the charge's, once Stripe has sent its own receipt
    preferred_locales: tuple[str, ...] = ()
    # Every line of the invoice when the payload's list was truncated. Shown on
    # the receipt, kept out of the fingerprint: a look-up that succeeds on one
    # delivery and fails on the next must not turn a duplicate into a conflict.
    all_lines: tuple[dict[str, Any], ...] | None = None
    # The merchant's tax ids the payload named only by id (``txi_…``).
    merchant_tax_ids: tuple[TaxId, ...] = ()
    # Product id -> name, for lines without a description whose product the
    # payload names only by id.
    product_names: tuple[tuple[str, str], ...] = ()
    # Paid outside Stripe, from the invoice's payments (API versions since
    # 2025-03-31.basil count such payments in ``amount_paid`` and have no flag).
    paid_off_stripe: int | None = None


def api_facts_document(facts: ApiFacts | None) -> dict[str, Any] | None:
    """The facts as JSON, stored with a receipt rendered at its first claim."""
    if facts is None:
        return None
    method = facts.payment_method
    return {
        "payment_method": None
        if method is None
        else {"kind": method.kind, "brand": method.brand, "last4": method.last4},
        "receipt_number": facts.receipt_number,
        "preferred_locales": list(facts.preferred_locales),
        "all_lines": list(facts.all_lines) if facts.all_lines else None,
        "merchant_tax_ids": [
            {"type": found.kind, "value": found.value}
            for found in facts.merchant_tax_ids[:MAX_TAX_IDS]
        ],
        "product_names": dict(facts.product_names[:MAX_PRODUCTS]),
        "paid_off_stripe": facts.paid_off_stripe,
    }


def api_facts_from_document(document: dict[str, Any] | None) -> ApiFacts:
    """The facts :func:`api_facts_document` stored; none when nothing was stored."""
    if not document:
        return ApiFacts()
    method = document.get("payment_method")
    return ApiFacts(
        payment_method=None if method is None else PaymentMethod(**method),
        receipt_number=document.get("receipt_number"),
        preferred_locales=tuple(document.get("preferred_locales") or ()),
        all_lines=tuple(document["all_lines"]) if document.get("all_lines") else None,
        merchant_tax_ids=tuple(
            TaxId(kind=found.get("type"), value=found["value"])
            for found in (document.get("merchant_tax_ids") or ())[:MAX_TAX_IDS]
        ),
        product_names=tuple((document.get("product_names") or {}).items())[:MAX_PRODUCTS],
        paid_off_stripe=document.get("paid_off_stripe"),
    )
