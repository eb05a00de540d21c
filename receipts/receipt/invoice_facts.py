"""A paid invoice, as any Stripe API version in use sends it, read into what a receipt shows.

One reading for every API version from 2019 to 2026-03-25.dahlia: line items
(``quantity`` or ``quantity_decimal``; the proration flag on the line before
2025-03-31.basil or under ``parent.*_details`` from then on), discounts
(``total_discount_amounts``, or the single ``discount`` of older versions),
taxes (``total_taxes`` since basil, ``total_tax_amounts`` before it, the bare
``tax`` before tax rates), the customer's credit balance, shipping and links.

What cannot become an email (no usable address, a link not on Stripe's hosts,
an amount Stripe cannot have sent) raises :class:`UnusableInvoice` with the
review reason. Every other field is optional: a missing one leaves its line
out of the receipt; a present but impossible amount sends the invoice to review.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from receipts.addresses import is_email_address
from receipts.receipt.invoice_totals import Discount, Tax, read_discounts, read_taxes
from receipts.receipt.invoice_values import (
    INVALID_AMOUNT_PAID,
    INVALID_CURRENCY,
    INVALID_CUSTOMER_EMAIL,
    INVALID_HOSTED_INVOICE_URL,
    MISSING_CUSTOMER_EMAIL,
    UnusableInvoice,
    dicts,
    is_count,
    is_timestamp,
    optional_amount,
    required_amount,
)
from receipts.receipt.money import is_amount
from receipts.receipt.untrusted import is_stripe_hosted_url, one_line

# Stripe's hosted invoice page; invoices from 2019-2020 link to pay.stripe.com.
HOSTED_INVOICE_HOSTS = ("invoice.stripe.com", "pay.stripe.com")
PDF_HOSTS = ("pay.stripe.com", "invoice.stripe.com", "files.stripe.com")
# A receipt lists this many lines at most, then "and N more on the invoice".
MAX_LINES_SHOWN = 50
MAX_QUANTITY = Decimal(10**12)

_CURRENCY = re.compile(r"[a-z]{3}")


@dataclass(frozen=True, kw_only=True)
class LineItem:
    description: str | None
    quantity: Decimal | None  # None when it is 1 or not given
    amount: int  # negative for a credit (an unused-time proration)
    proration: bool
    period: tuple[int, int] | None  # unix seconds, when the line covers a span


@dataclass(frozen=True, kw_only=True)
class ReceiptFacts:
    """Everything a receipt says, as plain values (amounts in Stripe's minor unit)."""

    invoice_id: str
    number: str
    to: str
    customer_name: str | None
    customer_address: tuple[str, ...]
    customer_country: str | None  # ISO 3166 alpha-2
    merchant: str | None
    currency: str  # lower-case ISO 4217, as Stripe sends it
    lines: tuple[LineItem, ...]
    more_lines: int | None  # lines on the invoice not listed, when the count is known
    lines_truncated: bool  # some lines are not listed
    subtotal: int | None
    discounts: tuple[Discount, ...]
    taxes: tuple[Tax, ...]
    shipping: int | None
    total: int | None
    credit_notes: int
    credit_applied: int  # taken from the customer's credit balance
    previous_balance: int  # owed from before and added to this invoice
    amount_paid: int
    paid_at: int | None  # unix seconds
    hosted_invoice_url: str
    invoice_pdf: str | None


def read_invoice(
    invoice_id: str,
    invoice: dict[str, Any],
    created: int | None,
    *,
    all_lines: list[dict[str, Any]] | None = None,
) -> ReceiptFacts:
    """Read the receipt's facts; raise UnusableInvoice if it cannot become an email.

    ``all_lines``: every line of the invoice, fetched from Stripe's API when
    the payload's list was truncated; shown instead of the payload's. (The
    fingerprint stays on the payload's own lines, so a fetch that succeeds
    once and fails on a redelivery cannot make a conflict.)
    """
    to = _recipient(invoice)
    if not is_stripe_hosted_url(invoice.get("hosted_invoice_url"), HOSTED_INVOICE_HOSTS):
        raise UnusableInvoice(INVALID_HOSTED_INVOICE_URL)
    amount_paid = invoice.get("amount_paid")
    if not isinstance(amount_paid, int) or not is_amount(amount_paid) or amount_paid < 0:
        raise UnusableInvoice(INVALID_AMOUNT_PAID)
    currency = invoice.get("currency")
    if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
        raise UnusableInvoice(INVALID_CURRENCY)
    if all_lines is not None:
        invoice = {**invoice, "lines": {"data": all_lines, "has_more": False}}
    lines, more_lines, truncated = _lines(invoice)
    credit_applied, previous_balance = _balance(invoice)
    address, country = _address(invoice.get("customer_address"))
    pdf = invoice.get("invoice_pdf")
    return ReceiptFacts(
        invoice_id=invoice_id,
        number=one_line(invoice.get("number"), 100) or invoice_id,
        to=to,
        customer_name=one_line(invoice.get("customer_name")),
        customer_address=address,
        customer_country=country,
        merchant=one_line(invoice.get("account_name")),
        currency=currency,
        lines=lines,
        more_lines=more_lines,
        lines_truncated=truncated,
        subtotal=optional_amount(invoice.get("subtotal")),
        discounts=read_discounts(invoice),
        taxes=read_taxes(invoice),
        shipping=_shipping(invoice),
        total=optional_amount(invoice.get("total")),
        credit_notes=optional_amount(invoice.get("pre_payment_credit_notes_amount")) or 0,
        credit_applied=credit_applied,
        previous_balance=previous_balance,
        amount_paid=amount_paid,
        paid_at=_paid_at(invoice, created),
        hosted_invoice_url=str(invoice["hosted_invoice_url"]),
        invoice_pdf=pdf if is_stripe_hosted_url(pdf, PDF_HOSTS) else None,
    )


def _recipient(invoice: dict[str, Any]) -> str:
    email = invoice.get("customer_email")
    if not isinstance(email, str) or not email.strip():
        raise UnusableInvoice(MISSING_CUSTOMER_EMAIL)
    if not is_email_address(email.strip()):
        raise UnusableInvoice(INVALID_CUSTOMER_EMAIL)
    return email.strip()


def _lines(invoice: dict[str, Any]) -> tuple[tuple[LineItem, ...], int | None, bool]:
    """The lines to list, how many more the invoice has (if known), and whether any are left out."""
    listing = invoice.get("lines")
    listing = listing if isinstance(listing, dict) else {}
    items = [_line(raw) for raw in dicts(listing.get("data"))]
    shown = tuple(items[:MAX_LINES_SHOWN])
    left_out = len(items) - len(shown)
    if listing.get("has_more") is not True:
        return shown, left_out or None, left_out > 0
    total_count = listing.get("total_count")  # gone since 2025-03-31.basil
    if isinstance(total_count, int) and is_count(total_count) and total_count > len(items):
        return shown, total_count - len(shown), True
    return shown, None, True


def _line(raw: dict[str, Any]) -> LineItem:
    return LineItem(
        description=one_line(raw.get("description"), 300) or _price_nickname(raw),
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


def _price_nickname(raw: dict[str, Any]) -> str | None:
    """A description for lines without one: the price's or (older versions) the plan's nickname."""
    pricing = raw.get("pricing")
    details = pricing.get("price_details") if isinstance(pricing, dict) else None
    candidates = (
        raw.get("price"),
        raw.get("plan"),
        details.get("price") if isinstance(details, dict) else None,
    )
    for candidate in candidates:
        if isinstance(candidate, dict) and one_line(candidate.get("nickname")):
            return one_line(candidate.get("nickname"))
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


def _balance(invoice: dict[str, Any]) -> tuple[int, int]:
    """(credit applied, previous balance added) from the customer balance before and after.

    A negative customer balance is a credit. ``starting_balance`` -400 and
    ``ending_balance`` 0 mean 4.00 of credit paid part of this invoice.
    """
    start = optional_amount(invoice.get("starting_balance"))
    end = optional_amount(invoice.get("ending_balance"))
    if start is None or end is None:
        return 0, 0
    change = end - start
    return max(change, 0), max(-change, 0)


def _shipping(invoice: dict[str, Any]) -> int | None:
    cost = invoice.get("shipping_cost")
    if isinstance(cost, dict):
        amount = optional_amount(cost.get("amount_subtotal"))
    else:
        amount = optional_amount(invoice.get("amount_shipping"))
    return amount if amount else None


def _paid_at(invoice: dict[str, Any], created: int | None) -> int | None:
    transitions = invoice.get("status_transitions")
    paid_at = transitions.get("paid_at") if isinstance(transitions, dict) else None
    if is_timestamp(paid_at):
        assert isinstance(paid_at, int)
        return paid_at
    return created if is_timestamp(created) else None


_LOCALITY_FIRST = frozenset({"US", "CA", "AU"})


def _address(value: object) -> tuple[tuple[str, ...], str | None]:
    """The billing address as display lines; the country apart, named in the reader's language."""
    if not isinstance(value, dict):
        return (), None
    part = {key: one_line(value.get(key), 100) for key in _ADDRESS_KEYS}
    lines: tuple[str | None, ...]
    country = part["country"].upper() if part["country"] and len(part["country"]) == 2 else None
    if country == "JP":  # largest to smallest: 〒604-0845 京都府京都市中京区…
        postal = f"〒{part['postal_code']}" if part["postal_code"] else None
        region = "".join(filter(None, (part["state"], part["city"], part["line1"])))
        lines = (postal, region, part["line2"])
    elif country in _LOCALITY_FIRST:
        region = " ".join(filter(None, (part["state"], part["postal_code"])))
        locality = ", ".join(filter(None, (part["city"], region)))
        lines = (part["line1"], part["line2"], locality)
    else:
        locality = " ".join(filter(None, (part["postal_code"], part["city"])))
        lines = (part["line1"], part["line2"], locality, part["state"])
    return tuple(line for line in lines if line), country


_ADDRESS_KEYS = ("line1", "line2", "city", "state", "postal_code", "country")
