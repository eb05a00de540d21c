"""How an invoice was paid, from the payload's own data, and how a receipt names it.

An ``invoice.paid`` payload names its payment only by id unless the sender
expanded it; :func:`paid_with_in_payload` reads what is there: an expanded
``charge`` (API versions before 2025-03-31), an expanded ``payment_intent``
(its ``latest_charge``, its older ``charges`` list, or its
``payment_method``), the expanded ``payments`` of newer versions, and, as a
last resort, ``payment_settings.payment_method_types`` when it allows a
single kind. With a Stripe API key, ingest looks up the rest
(:mod:`receipts.stripe_api.facts`, which reads charges with :func:`method_of`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from receipts.receipt.api_facts import Payment, PaymentMethod
from receipts.receipt.untrusted import one_line

Gettext = Callable[[str], str]


def N_(message: str) -> str:
    """Mark a message for the catalogs; it is translated where it is shown."""
    return message


def method_of(paid_with: dict[str, Any]) -> PaymentMethod | None:
    """A charge's or payment record's ``payment_method_details`` (or a PaymentMethod object)."""
    details = paid_with.get("payment_method_details")
    if not isinstance(details, dict) and paid_with.get("object") == "payment_method":
        details = paid_with
    if not isinstance(details, dict) or not _text(details.get("type")):
        return None
    kind = str(details["type"])
    specific = details.get(kind)
    specific = specific if isinstance(specific, dict) else {}
    brand = specific.get("brand") or specific.get("bank_name")
    last4 = specific.get("last4")
    return PaymentMethod(
        kind=kind,
        brand=brand if _text(brand) else None,
        last4=last4 if _text(last4) else None,
    )


def receipt_number_of(charge: dict[str, Any]) -> str | None:
    """The number Stripe gives the receipt of a charge ("1466-5230"), once it has sent one."""
    return one_line(charge.get("receipt_number"), 60)


def paid_with_in_payload(invoice: dict[str, Any]) -> Payment:
    """The payment method and receipt number the payload itself carries, as far as it does."""
    for charge in _charges(invoice):
        method = method_of(charge)
        if method is not None:
            return Payment(method=method, receipt_number=receipt_number_of(charge))
    intent = invoice.get("payment_intent")
    if isinstance(intent, dict) and isinstance(intent.get("payment_method"), dict):
        return Payment(method=method_of(intent["payment_method"]))
    return Payment(method=_the_only_kind(invoice))


def _charges(invoice: dict[str, Any]) -> list[dict[str, Any]]:
    """Every expanded charge of the payload, the invoice's own first."""
    found: list[object] = [invoice.get("charge")]
    intents: list[object] = [invoice.get("payment_intent")]
    payments = invoice.get("payments")
    listed = payments.get("data") if isinstance(payments, dict) else None
    for entry in listed if isinstance(listed, list) else []:
        payment = entry.get("payment") if isinstance(entry, dict) else None
        if isinstance(payment, dict) and entry.get("status") == "paid":
            found.append(payment.get("charge"))
            intents.append(payment.get("payment_intent"))
    for intent in intents:
        if isinstance(intent, dict):
            found.append(intent.get("latest_charge"))
            older = intent.get("charges")  # before 2022-11-15
            if isinstance(older, dict) and isinstance(older.get("data"), list):
                found += older["data"]
    return [charge for charge in found if isinstance(charge, dict)]


def _the_only_kind(invoice: dict[str, Any]) -> PaymentMethod | None:
    """The payment method type when the invoice allowed exactly one."""
    settings = invoice.get("payment_settings")
    kinds = settings.get("payment_method_types") if isinstance(settings, dict) else None
    if isinstance(kinds, list) and len(kinds) == 1 and _text(kinds[0]):
        return PaymentMethod(kind=str(kinds[0]))
    return None


_BRANDS = {
    "amex": "American Express",
    "cartes_bancaires": "Cartes Bancaires",
    "diners": "Diners Club",
    "discover": "Discover",
    "eftpos_au": "eftpos",
    "interac": "Interac",
    "jcb": "JCB",
    "link": "Link",
    "mastercard": "Mastercard",
    "unionpay": "UnionPay",
    "visa": "Visa",
}
_KINDS = {
    "acss_debit": N_("Pre-authorized debit"),
    "au_becs_debit": N_("BECS Direct Debit"),
    "bacs_debit": N_("Bacs Direct Debit"),
    "customer_balance": N_("Bank transfer"),
    "sepa_debit": N_("SEPA Direct Debit"),
    "us_bank_account": N_("Bank account"),
}
_NAMED_KINDS = {"link": "Link", "paypal": "PayPal", "cashapp": "Cash App Pay"}


def describe_payment_method(method: PaymentMethod | None, _: Gettext) -> str | None:
    """ "Visa ending in 4242", "SEPA Direct Debit ending in 3000"; None when unknown."""
    if method is None:
        return None
    brand = one_line(method.brand, 40)
    if method.kind == "card":
        name = _BRANDS.get(brand or "") or (brand.title() if brand else _("Card"))
    elif method.kind in _KINDS:
        name = brand if method.kind == "us_bank_account" and brand else _(_KINDS[method.kind])
    else:
        name = _NAMED_KINDS.get(method.kind, "")
    last4 = method.last4 if method.last4 and method.last4.isascii() else None
    if not name:
        return None
    if last4 and last4.isdigit() and len(last4) == 4:
        described = _("%(method)s ending in %(last4)s") % {"method": name, "last4": last4}
        # The digits never start a line of their own.
        return described.replace(f" {last4}", f"\u00a0{last4}")
    return name


def _text(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())
