"""A refund or a credit note of a paid invoice, read from its stored render input.

Ingest stores, beside the paid invoice (as the API returned it), the Stripe
Refund (``"kind": "refund"``) or CreditNote (``"kind": "credit_note"``)
object as Stripe gave it. This module reads both into plain values, with the
same rules as a receipt (:mod:`receipts.receipt.invoice_facts`): the
recipient is the invoice's ``customer_email``, links are used only on
Stripe's hosts, display text is one line, an amount Stripe cannot have sent
raises :class:`UnusableInvoice`. A credit note's rows must add up (lines to
subtotal to total, and the ways it was settled to the total), or it raises
:class:`CreditNoteDoesNotAddUp` with the numbers, and the row goes to review
as a receipt that does not add up does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from receipts.receipt.api_facts import ApiFacts, PaymentMethod, api_facts_from_document
from receipts.receipt.invoice_details import NO_DETAILS, InvoiceDetails, read_details
from receipts.receipt.invoice_facts import (
    HOSTED_INVOICE_HOSTS,
    PDF_HOSTS,
    paid_at_of,
    read_address,
    recipient_of,
)
from receipts.receipt.invoice_totals import Tax, read_taxes
from receipts.receipt.invoice_values import (
    INVALID_AMOUNTS,
    INVALID_CURRENCY,
    UnusableInvoice,
    dicts,
    is_timestamp,
    object_id,
    optional_amount,
    required_amount,
)
from receipts.receipt.payment_methods import method_of
from receipts.receipt.statement import ReceiptDoesNotAddUp
from receipts.receipt.untrusted import is_stripe_hosted_url, one_line

REFUND = "refund"
CREDIT_NOTE = "credit_note"
KINDS = (REFUND, CREDIT_NOTE)

# Refund and credit note reasons a customer is told; "fraudulent" never is.
REFUND_REASONS = ("duplicate", "requested_by_customer")
CREDIT_NOTE_REASONS = ("duplicate", "order_change", "product_unsatisfactory")
# A refund that did not (or not yet) move money is no refund to announce.
REFUND_STATUSES = ("succeeded", "pending")
# Credit notes list at most this many lines in the email; the PDF has them all.
MAX_CREDIT_LINES = 50

_CURRENCY = re.compile(r"[a-z]{3}")


class CreditNoteDoesNotAddUp(ReceiptDoesNotAddUp):
    """The credit note's lines, totals or settlement would not add up."""


@dataclass(frozen=True, kw_only=True)
class InvoiceReference:
    """The paid invoice a refund or credit note belongs to, as far as the email names it."""

    invoice_id: str
    number: str
    to: str
    customer_name: str | None
    merchant: str | None
    currency: str | None
    amount_paid: int | None
    paid_at: int | None
    hosted_invoice_url: str | None
    # Who is billed, and both tax ids, as the receipt reads them (the refund's PDF shows them).
    customer_address: tuple[str, ...] = ()
    customer_country: str | None = None  # ISO 3166 alpha-2
    details: InvoiceDetails = NO_DETAILS


@dataclass(frozen=True, kw_only=True)
class RefundFacts:
    """One refund, amounts in Stripe's minor unit."""

    refund_id: str
    invoice: InvoiceReference
    amount: int
    currency: str
    refunded_at: int | None
    reason: str | None  # one of REFUND_REASONS, else None
    pending: bool  # Stripe has not confirmed it yet (bank debits take days)
    method: PaymentMethod | None  # where the money goes, as the refund itself says

    @property
    def partial(self) -> bool:
        """Less than the invoice's amount paid, in the same currency."""
        paid = self.invoice.amount_paid
        return self.invoice.currency == self.currency and paid is not None and self.amount < paid


@dataclass(frozen=True, kw_only=True)
class CreditLine:
    description: str | None
    quantity: Decimal | None  # shown when not 1
    amount: int  # before discounts and taxes added on top


@dataclass(frozen=True, kw_only=True)
class Settlement:
    """How the credit note's total reached the customer; each part positive or 0."""

    refunded: int = 0  # back to the payment method
    credited: int = 0  # to the customer's credit balance, for later invoices
    out_of_band: int = 0  # outside Stripe (cash, bank transfer…)
    invoice: int = 0  # taken off what the invoice still owed

    @property
    def total(self) -> int:
        return self.refunded + self.credited + self.out_of_band + self.invoice


@dataclass(frozen=True, kw_only=True)
class CreditNoteFacts:
    """One credit note; every amount row checked to add up."""

    credit_note_id: str
    number: str
    invoice: InvoiceReference
    currency: str
    issued_at: int | None
    lines: tuple[CreditLine, ...]
    more_lines: bool  # the payload did not list every line
    lines_sum: int | None  # of every line, when all are listed
    subtotal: int | None  # Stripe's: line discounts taken off, invoice-level ones not
    discount: int  # every discount credited
    taxes: tuple[Tax, ...]
    shipping: int
    total: int
    settlement: Settlement
    reason: str | None  # one of CREDIT_NOTE_REASONS, else None
    memo: str | None
    pdf: str | None


def read_invoice_reference(
    invoice: dict[str, Any], api_facts: ApiFacts | None = None
) -> InvoiceReference:
    """The invoice a refund or credit note names; UnusableInvoice without a usable recipient.

    ``api_facts``: what ingest looked up about the invoice (the merchant's tax ids).
    """
    invoice_id = object_id(invoice)
    if not invoice_id:
        raise UnusableInvoice(INVALID_AMOUNTS, detail="the invoice has no id")
    hosted = invoice.get("hosted_invoice_url")
    currency = invoice.get("currency")
    address, country = read_address(invoice.get("customer_address"))
    return InvoiceReference(
        invoice_id=invoice_id,
        number=one_line(invoice.get("number"), 100) or invoice_id,
        to=recipient_of(invoice),
        customer_name=one_line(invoice.get("customer_name")),
        merchant=one_line(invoice.get("account_name")),
        currency=currency if isinstance(currency, str) and _CURRENCY.fullmatch(currency) else None,
        amount_paid=optional_amount(invoice.get("amount_paid")),
        paid_at=paid_at_of(invoice, None),
        hosted_invoice_url=str(hosted)
        if is_stripe_hosted_url(hosted, HOSTED_INVOICE_HOSTS)
        else None,
        customer_address=address,
        customer_country=country,
        details=read_details(invoice, api_facts),
    )


def read_refund(render_input: dict[str, Any]) -> RefundFacts:
    """The refund of ``render_input``; UnusableInvoice if it cannot become an email."""
    refund = _object(render_input, REFUND)
    invoice = _invoice_of(render_input)
    amount = required_amount(refund.get("amount"))
    if amount <= 0:
        raise UnusableInvoice(INVALID_AMOUNTS, detail=f"refund amount {amount}")
    currency = _currency(refund)
    paid = invoice.amount_paid
    if invoice.currency == currency and paid is not None and amount > paid:
        raise CreditNoteDoesNotAddUp(
            f"{currency}: refund {amount} is more than the invoice's amount paid {paid}"
        )
    status = refund.get("status")
    if status is not None and status not in REFUND_STATUSES:
        raise UnusableInvoice(INVALID_AMOUNTS, detail=f"refund status {one_line(status, 40)}")
    reason = refund.get("reason")
    return RefundFacts(
        refund_id=object_id(refund) or "",
        invoice=invoice,
        amount=amount,
        currency=currency,
        refunded_at=_timestamp(refund.get("created")),
        reason=reason if reason in REFUND_REASONS else None,
        pending=status == "pending",
        method=_destination(refund),
    )


def read_credit_note(render_input: dict[str, Any]) -> CreditNoteFacts:
    """The credit note of ``render_input``; CreditNoteDoesNotAddUp if its rows would not add up."""
    note = _object(render_input, CREDIT_NOTE)
    invoice = _invoice_of(render_input)
    currency = _currency(note)
    listed = note.get("lines")
    entries = dicts(listed.get("data")) if isinstance(listed, dict) else dicts(listed)
    more = isinstance(listed, dict) and listed.get("has_more") is True
    lines = tuple(_credit_line(entry) for entry in entries[:MAX_CREDIT_LINES])
    more = more or len(entries) > MAX_CREDIT_LINES
    total = required_amount(note.get("total", note.get("amount")))
    pdf = note.get("pdf")
    reason = note.get("reason")
    shipping = note.get("shipping_cost")
    facts = CreditNoteFacts(
        credit_note_id=object_id(note) or "",
        number=one_line(note.get("number"), 100) or object_id(note) or "",
        invoice=invoice,
        currency=currency,
        issued_at=_timestamp(note.get("effective_at")) or _timestamp(note.get("created")),
        lines=lines,
        more_lines=more,
        lines_sum=None if more or not lines else sum(line.amount for line in lines),
        subtotal=optional_amount(note.get("subtotal")),
        discount=optional_amount(note.get("discount_amount")) or 0,
        taxes=read_taxes(
            {"total_taxes": note.get("total_taxes"), "total_tax_amounts": note.get("tax_amounts")}
        ),
        shipping=(optional_amount(shipping.get("amount_subtotal")) or 0)
        if isinstance(shipping, dict)
        else (optional_amount(note.get("amount_shipping")) or 0),
        total=total,
        settlement=_settlement(note, total, currency),
        reason=reason if reason in CREDIT_NOTE_REASONS else None,
        memo=one_line(note.get("memo"), 500),
        pdf=str(pdf) if is_stripe_hosted_url(pdf, PDF_HOSTS) else None,
    )
    _check_rows(note, facts, entries[:MAX_CREDIT_LINES])
    return facts


def _invoice_of(render_input: dict[str, Any]) -> InvoiceReference:
    api_facts = api_facts_from_document(render_input.get("api_facts"))
    return read_invoice_reference(_object(render_input, "invoice"), api_facts)


def _object(render_input: dict[str, Any], key: str) -> dict[str, Any]:
    found = render_input.get(key)
    if not isinstance(found, dict):
        raise UnusableInvoice(INVALID_AMOUNTS, detail=f"the render input has no {key}")
    return found


def _currency(document: dict[str, Any]) -> str:
    currency = document.get("currency")
    if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
        raise UnusableInvoice(INVALID_CURRENCY)
    return currency


def _timestamp(value: object) -> int | None:
    return value if isinstance(value, int) and is_timestamp(value) else None


def _destination(refund: dict[str, Any]) -> PaymentMethod | None:
    """The refund's own ``destination_details`` (newer API versions), as a payment method."""
    details = refund.get("destination_details")
    if not isinstance(details, dict):
        return None
    return method_of({"payment_method_details": details})


def _credit_line(entry: dict[str, Any]) -> CreditLine:
    quantity = entry.get("quantity")
    return CreditLine(
        description=one_line(entry.get("description")),
        quantity=_quantity(quantity),
        amount=required_amount(entry.get("amount")),
    )


def _quantity(value: object) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    try:
        number = Decimal(value)
    except InvalidOperation:
        return None
    return number if number.is_finite() and number > 0 and number != 1 else None


def _settlement(note: dict[str, Any], total: int, currency: str) -> Settlement:
    """Refunded, credited, out of band, off the invoice: what Stripe says, the rest inferred.

    Stripe names the refund and the balance transaction, and gives their
    amounts only when expanded (``refunds[].amount_refunded`` since
    2025-03-31.basil). One part without an amount is what the others leave of
    the total; two cannot be told apart, and the credit note goes to review.
    """
    refunded, refund_unknown = _refunded(note)
    credited, credit_unknown = _credited(note)
    out_of_band = optional_amount(note.get("out_of_band_amount")) or 0
    pre_payment = optional_amount(note.get("pre_payment_amount")) or 0
    known = refunded + credited + out_of_band + pre_payment
    rest = total - known
    if refund_unknown and credit_unknown:
        raise CreditNoteDoesNotAddUp(
            f"{currency}: the refund and the balance credit carry no amounts; total {total}"
        )
    if refund_unknown:
        refunded += rest
    elif credit_unknown:
        credited += rest
    settled = Settlement(
        refunded=refunded, credited=credited, out_of_band=out_of_band, invoice=pre_payment
    )
    if settled.total != total or min(refunded, credited, out_of_band, pre_payment) < 0:
        raise CreditNoteDoesNotAddUp(
            f"{currency}: refunded {refunded} + credited {credited} + out of band "
            f"{out_of_band} + off the invoice {pre_payment} = {settled.total}, "
            f"but the total is {total}"
        )
    return settled


def _refunded(note: dict[str, Any]) -> tuple[int, bool]:
    """(the amount refunded that Stripe states, whether a refund without an amount exists)."""
    amount, unknown = 0, False
    for entry in dicts(note.get("refunds")):  # since 2025-03-31.basil
        value = optional_amount(entry.get("amount_refunded"))
        amount += value or 0
        unknown = unknown or value is None
    refund = note.get("refund")  # before basil: one refund, an id unless expanded
    if isinstance(refund, dict):
        amount += required_amount(refund.get("amount"))
    elif isinstance(refund, str):
        unknown = True
    return amount, unknown


def _credited(note: dict[str, Any]) -> tuple[int, bool]:
    """(the credit added to the customer's balance, whether its amount is unknown).

    An expanded balance transaction states it (negative: credit); otherwise
    ``credit_amount`` may, and a bare id leaves it to the rest of the total.
    """
    transaction = note.get("customer_balance_transaction")
    if isinstance(transaction, dict):
        return -required_amount(transaction.get("amount")), False
    stated = optional_amount(note.get("credit_amount"))
    if stated is not None:
        return stated, False
    return 0, isinstance(transaction, str)


def _check_rows(
    note: dict[str, Any], facts: CreditNoteFacts, entries: list[dict[str, Any]]
) -> None:
    """Lines to subtotal, subtotal to total, as Stripe states them."""
    currency = facts.currency
    subtotal = facts.subtotal
    added = sum(tax.amount for tax in facts.taxes if not tax.inclusive)
    if facts.lines_sum is not None:
        line_discounts = sum(
            optional_amount(entry.get("discount_amount")) or 0 for entry in entries
        )
        if subtotal is not None and facts.lines_sum - line_discounts != subtotal:
            raise CreditNoteDoesNotAddUp(
                f"{currency}: lines {facts.lines_sum} - line discounts {line_discounts} "
                f"= {facts.lines_sum - line_discounts}, but the subtotal is {subtotal}"
            )
        computed = facts.lines_sum - facts.discount + added + facts.shipping
        if computed != facts.total:
            raise CreditNoteDoesNotAddUp(
                f"{currency}: lines {facts.lines_sum} - discounts {facts.discount} + taxes "
                f"{added} + shipping {facts.shipping} = {computed}, but the total is {facts.total}"
            )
    elif subtotal is not None and not 0 <= invoice_discount(facts) <= facts.discount:
        raise CreditNoteDoesNotAddUp(
            f"{currency}: subtotal {subtotal} + taxes {added} + shipping {facts.shipping} "
            f"- discounts {facts.discount} cannot make the total {facts.total}"
        )
    amount = optional_amount(note.get("amount"))
    if amount is not None and amount != facts.total:
        raise CreditNoteDoesNotAddUp(f"{currency}: amount {amount}, but the total is {facts.total}")
    if facts.total <= 0:
        raise CreditNoteDoesNotAddUp(f"{currency}: total {facts.total}")


def invoice_discount(facts: CreditNoteFacts) -> int:
    """The discounts on the whole invoice (not on single lines) that the credit note credits.

    Stripe's subtotal has the line discounts taken off already: what stands
    between it, with taxes and shipping, and the total is the rest.
    """
    added = sum(tax.amount for tax in facts.taxes if not tax.inclusive)
    return (facts.subtotal or 0) + added + facts.shipping - facts.total
