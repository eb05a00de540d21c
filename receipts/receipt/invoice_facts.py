"""A paid invoice, as any Stripe API version in use sends it, read into what a receipt shows.

One reading for every API version from 2019 to 2026-03-25.dahlia: line items
(:mod:`receipts.receipt.invoice_lines`), discounts (``total_discount_amounts``,
or the single ``discount`` of older versions), taxes (``total_taxes`` since
basil, ``total_tax_amounts`` before it, the bare ``tax`` before tax rates),
the customer's balance before and after, shipping, links, and what the
invoice says about itself (:mod:`receipts.receipt.invoice_details`).

What cannot become an email (no usable address, a link not on Stripe's hosts,
an amount Stripe cannot have sent) raises :class:`UnusableInvoice` with the
review reason. Every other field is optional: a missing one leaves its line
out of the receipt; a present but impossible amount sends the invoice to review.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from receipts.addresses import is_email_address
from receipts.receipt.api_facts import ApiFacts, Payment
from receipts.receipt.invoice_details import NO_DETAILS, InvoiceDetails, read_details
from receipts.receipt.invoice_lines import MAX_LINES_SHOWN as MAX_LINES_SHOWN
from receipts.receipt.invoice_lines import LineItem as LineItem
from receipts.receipt.invoice_lines import read_lines
from receipts.receipt.invoice_totals import Discount, Tax, read_discounts, read_taxes
from receipts.receipt.invoice_values import (
    INVALID_AMOUNT_PAID,
    INVALID_CURRENCY,
    INVALID_CUSTOMER_EMAIL,
    INVALID_HOSTED_INVOICE_URL,
    MISSING_CUSTOMER_EMAIL,
    UnusableInvoice,
    is_timestamp,
    optional_amount,
)
from receipts.receipt.money import is_amount
from receipts.receipt.payment_methods import paid_with_in_payload
from receipts.receipt.untrusted import is_stripe_hosted_url, one_line

# Stripe's hosted invoice page; invoices from 2019-2020 link to pay.stripe.com.
HOSTED_INVOICE_HOSTS = ("invoice.stripe.com", "pay.stripe.com")
PDF_HOSTS = ("pay.stripe.com", "invoice.stripe.com", "files.stripe.com")

_CURRENCY = re.compile(r"[a-z]{3}")


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
    subtotal: int | None  # Stripe's: line-item discounts already taken off
    discounts: tuple[Discount, ...]  # every discount, those on single items included
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
    lines_listed: bool = True  # the payload carries a line list at all
    credit_added: int = 0  # a negative total, added to the customer's credit balance
    carried_forward: int = 0  # left on the customer's balance for the next invoice
    payment: Payment = field(default_factory=Payment)  # as far as the payload says
    receipt_number: str | None = None  # the invoice's own, when Stripe sent a receipt
    details: InvoiceDetails = NO_DETAILS


def read_invoice(
    invoice_id: str,
    invoice: dict[str, Any],
    created: int | None,
    *,
    all_lines: list[dict[str, Any]] | None = None,
    api_facts: ApiFacts | None = None,
) -> ReceiptFacts:
    """Read the receipt's facts; raise UnusableInvoice if it cannot become an email.

    ``all_lines``: every line of the invoice, fetched from Stripe's API when
    the payload's list was truncated; shown instead of the payload's. (The
    fingerprint stays on the payload's own lines, so a fetch that succeeds
    once and fails on a redelivery cannot make a conflict.) ``api_facts``:
    what else ingest looked up (product names, the merchant's tax ids, what
    was paid outside Stripe), as stored with the render input.
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
    known = api_facts or ApiFacts()
    lines = read_lines(invoice, dict(known.product_names))
    balance = _balance(invoice)
    address, country = read_address(invoice.get("customer_address"))
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
        lines=lines.shown,
        more_lines=lines.more,
        lines_truncated=lines.truncated,
        lines_listed=lines.listed,
        subtotal=optional_amount(invoice.get("subtotal")),
        discounts=read_discounts(invoice),
        taxes=read_taxes(invoice),
        shipping=_shipping(invoice),
        total=optional_amount(invoice.get("total")),
        credit_notes=optional_amount(invoice.get("pre_payment_credit_notes_amount")) or 0,
        credit_applied=balance.credit_applied,
        previous_balance=balance.previous_balance,
        credit_added=balance.credit_added,
        carried_forward=balance.carried_forward,
        amount_paid=amount_paid,
        paid_at=_paid_at(invoice, created),
        hosted_invoice_url=str(invoice["hosted_invoice_url"]),
        invoice_pdf=pdf if is_stripe_hosted_url(pdf, PDF_HOSTS) else None,
        payment=paid_with_in_payload(invoice),
        receipt_number=one_line(invoice.get("receipt_number"), 60),
        details=read_details(invoice, known),
    )


def recipient_of(invoice: dict[str, Any]) -> str:
    """The invoice's ``customer_email``: the recipient of every email about it."""
    return _recipient(invoice)


def paid_at_of(invoice: dict[str, Any], created: int | None) -> int | None:
    """When the invoice was paid (``status_transitions.paid_at``), else ``created``."""
    return _paid_at(invoice, created)


def _recipient(invoice: dict[str, Any]) -> str:
    email = invoice.get("customer_email")
    if not isinstance(email, str) or not email.strip():
        raise UnusableInvoice(MISSING_CUSTOMER_EMAIL)
    if not is_email_address(email.strip()):
        raise UnusableInvoice(INVALID_CUSTOMER_EMAIL)
    return email.strip()


@dataclass(frozen=True, kw_only=True)
class BalanceChange:
    """What the customer's balance did to this invoice; each part positive or 0.

    What was due is ``total - credit notes + previous_balance - credit_applied
    + credit_added - carried_forward``.
    """

    credit_applied: int = 0  # credit the customer had, used here
    previous_balance: int = 0  # owed from before, added here
    credit_added: int = 0  # a negative total, kept as credit
    carried_forward: int = 0  # too small to charge: added to the balance for next time


def _balance(invoice: dict[str, Any]) -> BalanceChange:
    """The change from ``starting_balance`` to ``ending_balance``; a negative balance is credit.

    -400 before and 0 after: 4.00 of credit paid part of this invoice. 300
    before and 0 after: 3.00 owed from before was added. 0 and -500: a
    negative total became 5.00 of credit. 0 and 30: 0.30 was too little to
    charge and waits for the next invoice.
    """
    start = optional_amount(invoice.get("starting_balance"))
    end = optional_amount(invoice.get("ending_balance"))
    if start is None or end is None:
        return BalanceChange()
    credit_used = max(-start, 0) - max(-end, 0)
    return BalanceChange(
        credit_applied=max(credit_used, 0),
        previous_balance=max(start, 0),
        credit_added=max(-credit_used, 0),
        carried_forward=max(end, 0),
    )


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


def read_address(value: object) -> tuple[tuple[str, ...], str | None]:
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
