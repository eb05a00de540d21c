"""Discounts and taxes of a paid invoice, across the API versions that shaped them.

Discounts: ``total_discount_amounts`` (one entry per discount) since 2019-12;
before it, the single ``discount`` object and ``subtotal - total + tax``.
Credit grants applied before tax (``total_pretax_credit_amounts`` of type
``credit_balance_transaction``) are listed with them.
Names: a discount's coupon is an object only where the payload expanded it
(the legacy ``discount`` always did); newer payloads carry ids, and the line
then just says "Discount". ``total_discount_amounts`` lists discounts on
single line items too, which Stripe's ``subtotal`` has already taken off; a
discount not among the invoice's own ``discounts`` is such a one.

Taxes: ``total_taxes`` since 2025-03-31.basil (``tax_behavior``,
``tax_rate_details.tax_rate``), ``total_tax_amounts`` before it
(``inclusive``, ``tax_rate``), and the bare ``tax`` (with ``tax_percent``) of
the oldest versions. A rate's name and percentage come from the tax rate
objects the payload carries (``default_tax_rates``, the lines' ``tax_rates``,
or an expanded ``tax_rate``).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from receipts.receipt.invoice_values import (
    dicts,
    object_id,
    optional_amount,
    percentage,
    required_amount,
)
from receipts.receipt.untrusted import one_line


@dataclass(frozen=True, kw_only=True)
class Discount:
    name: str | None  # the coupon's name, when the payload has it
    percent_off: Decimal | None
    amount: int  # what it took off, positive
    credit: bool = False  # a credit grant rather than a coupon
    on_items: bool = False  # on single line items: already off Stripe's subtotal


@dataclass(frozen=True, kw_only=True)
class Tax:
    name: str | None  # the tax rate's display name (and jurisdiction)
    percentage: Decimal | None
    inclusive: bool  # already part of the prices: shown, not added
    reverse_charge: bool
    amount: int


def read_discounts(invoice: dict[str, Any]) -> tuple[Discount, ...]:
    coupons = _coupons(invoice)
    entries = invoice.get("total_discount_amounts")
    if isinstance(entries, list):
        on_invoice = _invoice_discount_ids(invoice)
        found = [
            _discount(
                coupons.get(object_id(entry.get("discount")) or ""),
                entry.get("amount"),
                on_items=_on_items(entry.get("discount"), on_invoice),
            )
            for entry in dicts(entries)
        ]
    else:
        found = _legacy_discount(invoice)
    found += [
        Discount(
            name=None, percent_off=None, amount=required_amount(entry.get("amount")), credit=True
        )
        for entry in dicts(invoice.get("total_pretax_credit_amounts"))
        if entry.get("type") == "credit_balance_transaction"
    ]
    return tuple(discount for discount in found if discount.amount)


def read_taxes(invoice: dict[str, Any]) -> tuple[Tax, ...]:
    rates = _tax_rates(invoice)
    taxes = dicts(invoice.get("total_taxes"))  # since 2025-03-31.basil
    if taxes:
        return tuple(
            _tax(
                rates.get(object_id(_tax_rate_details(entry).get("tax_rate")) or "", {}),
                entry,
                inclusive=entry.get("tax_behavior") == "inclusive",
            )
            for entry in taxes
        )
    amounts = dicts(invoice.get("total_tax_amounts"))  # tax rates, before basil
    if amounts:
        return tuple(
            _tax(
                rates.get(object_id(entry.get("tax_rate")) or "", {}),
                entry,
                inclusive=entry.get("inclusive") is True,
            )
            for entry in amounts
        )
    amount = optional_amount(invoice.get("tax"))  # before tax rates: `tax` and `tax_percent`
    if not amount:
        return ()
    rate = percentage(invoice.get("tax_percent"))
    return (Tax(name=None, percentage=rate, inclusive=False, reverse_charge=False, amount=amount),)


def _discount(
    coupon: tuple[str | None, Decimal | None] | None, amount: object, *, on_items: bool
) -> Discount:
    name, percent_off = coupon or (None, None)
    return Discount(
        name=name, percent_off=percent_off, amount=required_amount(amount), on_items=on_items
    )


def _invoice_discount_ids(invoice: dict[str, Any]) -> frozenset[str] | None:
    """The ids of the invoice's own discounts; None when the payload does not list them."""
    listed = invoice.get("discounts")
    if not isinstance(listed, list):
        return None
    return frozenset(found for found in map(object_id, listed) if found)


def _on_items(discount: object, on_invoice: frozenset[str] | None) -> bool:
    if isinstance(discount, dict) and (
        discount.get("invoice_item") or discount.get("subscription_item")
    ):
        return True
    found = object_id(discount)
    return on_invoice is not None and found is not None and found not in on_invoice


def _legacy_discount(invoice: dict[str, Any]) -> list[Discount]:
    """Before ``total_discount_amounts``: one ``discount``, its amount what the totals leave."""
    discount = invoice.get("discount")
    subtotal = optional_amount(invoice.get("subtotal"))
    total = optional_amount(invoice.get("total"))
    if not isinstance(discount, dict) or subtotal is None or total is None:
        return []
    added_tax = sum(tax.amount for tax in read_taxes(invoice) if not tax.inclusive)
    amount = subtotal + added_tax - total
    if amount <= 0:
        return []
    name, percent_off = _coupon(discount) or (None, None)
    return [Discount(name=name, percent_off=percent_off, amount=amount)]


def _coupons(invoice: dict[str, Any]) -> dict[str, tuple[str | None, Decimal | None]]:
    """Discount id -> (coupon name, percent off) for every discount object the payload expands."""
    candidates: list[object] = [invoice.get("discount")]
    listed = invoice.get("discounts")
    if isinstance(listed, list):
        candidates += listed
    candidates += [entry.get("discount") for entry in dicts(invoice.get("total_discount_amounts"))]
    found: dict[str, tuple[str | None, Decimal | None]] = {}
    for discount in candidates:
        coupon = _coupon(discount)
        if coupon is not None and object_id(discount) is not None:
            found[str(object_id(discount))] = coupon
    return found


def _coupon(discount: object) -> tuple[str | None, Decimal | None] | None:
    """(name, percent off) of an expanded discount's coupon: ``coupon``, or ``source.coupon``."""
    if not isinstance(discount, dict):
        return None
    source = discount.get("source")  # since 2025-09-30.clover
    coupon = discount.get("coupon") or (source.get("coupon") if isinstance(source, dict) else None)
    if not isinstance(coupon, dict):
        return None
    return one_line(coupon.get("name"), 100), percentage(coupon.get("percent_off"))


def _tax_rate_details(entry: dict[str, Any]) -> dict[str, Any]:
    details = entry.get("tax_rate_details")
    return details if isinstance(details, dict) else {}


def _tax_rates(invoice: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Tax rate id -> tax rate object, for every tax rate object the payload carries."""
    candidates = dicts(invoice.get("default_tax_rates"))
    listing = invoice.get("lines")
    for line in dicts(listing.get("data") if isinstance(listing, dict) else None):
        candidates += dicts(line.get("tax_rates"))
    for entry in dicts(invoice.get("total_tax_amounts")):
        candidates += dicts([entry.get("tax_rate")])
    for entry in dicts(invoice.get("total_taxes")):
        candidates += dicts([_tax_rate_details(entry).get("tax_rate")])
    return {str(rate["id"]): rate for rate in candidates if isinstance(rate.get("id"), str)}


def _tax(rate: dict[str, Any], entry: dict[str, Any], *, inclusive: bool) -> Tax:
    name = one_line(rate.get("display_name"), 100)
    jurisdiction = one_line(rate.get("jurisdiction"), 100)
    if name and jurisdiction:
        name = f"{name} \u2013 {jurisdiction}"
    return Tax(
        name=name,
        percentage=percentage(rate.get("percentage")),
        inclusive=inclusive,
        reverse_charge=entry.get("taxability_reason") == "reverse_charge",
        amount=required_amount(entry.get("amount")),
    )
