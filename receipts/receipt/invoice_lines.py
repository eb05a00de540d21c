"""The line items of a paid invoice, as every API version in use sends them.

``quantity`` or ``quantity_decimal``; the proration flag on the line before
2025-03-31.basil or under ``parent.*_details`` from then on; the line's name
from its description, else its product's name (when the payload expands the
price's product, or as ingest looked it up in Stripe's API by the id in
``price.product``, ``plan.product`` or, since basil,
``pricing.price_details.product``), else the price's or plan's nickname
(which Stripe calls internal: the last resort). Each line's ``amount`` is
what it costs before any discount: discounts are listed once, on their own
rows (:mod:`receipts.receipt.invoice_totals`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from receipts.receipt.invoice_values import dicts, is_count, is_timestamp, required_amount
from receipts.receipt.untrusted import one_line

# A receipt lists this many lines at most, then "and N more on the invoice".
MAX_LINES_SHOWN = 50
MAX_QUANTITY = Decimal(10**12)


@dataclass(frozen=True, kw_only=True)
class LineItem:
    description: str | None
    quantity: Decimal | None  # None when it is 1 or not given
    amount: int  # before discounts; negative for a credit (an unused-time proration)
    proration: bool
    period: tuple[int, int] | None  # unix seconds, when the line covers a span


@dataclass(frozen=True, kw_only=True)
class LineListing:
    """The lines a receipt lists, and what it knows about the ones it does not."""

    shown: tuple[LineItem, ...]
    more: int | None  # lines on the invoice not listed, when the count is known
    truncated: bool  # some lines are not listed
    listed: bool  # the payload carries a line list at all


def read_lines(
    invoice: dict[str, Any], product_names: Mapping[str, str] | None = None
) -> LineListing:
    """The lines to list, how many more the invoice has (if known), and whether any are left out.

    ``product_names``: product id -> name, as ingest looked them up in the API.
    """
    listing = invoice.get("lines")
    if not isinstance(listing, dict) or not isinstance(listing.get("data"), list):
        return LineListing(shown=(), more=None, truncated=False, listed=False)
    names = product_names or {}
    items = [_line(raw, names) for raw in dicts(listing.get("data"))]
    shown = tuple(items[:MAX_LINES_SHOWN])
    left_out = len(items) - len(shown)
    if listing.get("has_more") is not True:
        return LineListing(shown=shown, more=left_out or None, truncated=left_out > 0, listed=True)
    total_count = listing.get("total_count")  # gone since 2025-03-31.basil
    if isinstance(total_count, int) and is_count(total_count) and total_count > len(items):
        return LineListing(shown=shown, more=total_count - len(shown), truncated=True, listed=True)
    return LineListing(shown=shown, more=None, truncated=True, listed=True)


def _line(raw: dict[str, Any], product_names: Mapping[str, str]) -> LineItem:
    return LineItem(
        description=one_line(raw.get("description"), 300) or _name_from_price(raw, product_names),
        quantity=_quantity(raw),
        amount=required_amount(raw.get("amount")),
        proration=_is_proration(raw),
        period=_period(raw.get("period")),
    )


def _period(period: object) -> tuple[int, int] | None:
    """The span a line covers; None for a one-off item (Stripe gives it start == end)."""
    if not isinstance(period, dict):
        return None
    start, end = period.get("start"), period.get("end")
    if isinstance(start, int) and isinstance(end, int) and is_timestamp(start) and start < end:
        return (start, end) if is_timestamp(end) else None
    return None


def products_to_name(invoice: dict[str, Any]) -> list[str]:
    """The product ids of the listed lines that have no name of their own, once each.

    A line has none when it has no description and the payload does not
    expand its product: its name must be looked up (a nickname does not count,
    Stripe keeps it from customers).
    """
    listing = invoice.get("lines")
    lines = dicts(listing.get("data"))[:MAX_LINES_SHOWN] if isinstance(listing, dict) else []
    wanted: dict[str, None] = {}
    for raw in lines:
        if one_line(raw.get("description"), 300):
            continue
        products = _products(raw)
        if any(isinstance(found, dict) and one_line(found.get("name"), 300) for found in products):
            continue
        for found in products:
            if isinstance(found, str) and found.startswith("prod_"):
                wanted[found] = None
    return list(wanted)


def _prices(raw: dict[str, Any]) -> tuple[list[object], dict[str, Any]]:
    pricing = raw.get("pricing")
    details = pricing.get("price_details") if isinstance(pricing, dict) else None
    details = details if isinstance(details, dict) else {}
    return [raw.get("price"), raw.get("plan"), details.get("price")], details


def _products(raw: dict[str, Any]) -> list[object]:
    prices, details = _prices(raw)
    products = [price.get("product") for price in prices if isinstance(price, dict)]
    products.append(details.get("product"))
    return products


def _name_from_price(raw: dict[str, Any], product_names: Mapping[str, str]) -> str | None:
    """A name for a line without a description: its product's name, else a nickname."""
    prices, _ = _prices(raw)
    products = _products(raw)
    for product in products:
        if isinstance(product, dict) and one_line(product.get("name"), 300):
            return one_line(product.get("name"), 300)
    for product in products:
        if isinstance(product, str) and one_line(product_names.get(product), 300):
            return one_line(product_names.get(product), 300)
    for price in prices:
        if isinstance(price, dict) and one_line(price.get("nickname")):
            return one_line(price.get("nickname"))
    return None


def _quantity(raw: dict[str, Any]) -> Decimal | None:
    """The quantity when it is more than one: ``quantity_decimal`` (a string) or ``quantity``."""
    value: Decimal | None = None
    decimal_text = raw.get("quantity_decimal")
    if isinstance(decimal_text, str) and len(decimal_text) <= 40:
        try:
            value = Decimal(decimal_text)
        except InvalidOperation:
            value = None
    quantity = raw.get("quantity")
    if value is None and isinstance(quantity, int) and not isinstance(quantity, bool):
        value = Decimal(quantity)
    if value is None or not value.is_finite() or not 1 < value <= MAX_QUANTITY:
        return None
    return value.normalize() if value == value.to_integral_value() else value


def _is_proration(raw: dict[str, Any]) -> bool:
    if raw.get("proration") is True:  # before 2025-03-31.basil
        return True
    parent = raw.get("parent")
    if not isinstance(parent, dict):
        return False
    return any(
        isinstance(details, dict) and details.get("proration") is True
        for details in (
            parent.get("subscription_item_details"),
            parent.get("invoice_item_details"),
        )
    )
