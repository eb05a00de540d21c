"""From a verified Stripe event to the one receipt it may cause: a pure function.

:func:`derive_receipt` looks only at the event and the settings and returns
what ingest must store:

* :class:`Ignored`: not a paid invoice we send for (other types, zero value:
  see :func:`is_zero_value`);
* :class:`ReceiptJob`: the message key, its fingerprint, and what the email is
  rendered from (``render_input``); the worker renders it once, at the row's
  first claim (:func:`receipts.receipt.payload.render_payload`);
* :class:`UnsendableReceipt`: a paid invoice that cannot yield an email; it
  becomes a ``review`` row so a person sees it, and Stripe is not made to retry.
  The row keeps what the email would be rendered from, so a person who knows
  the right address can have it sent there (``receipts review resend --to``).

An event that cannot name its receipt (no invoice id, a key that would be too
long) raises :class:`MalformedEvent`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from receipts.message_keys import INVOICE_PAID, InvalidMessageKey, message_key
from receipts.receipt.api_facts import ApiFacts, api_facts_document
from receipts.receipt.event import EventHeader, MalformedEvent, is_stripe_id
from receipts.receipt.fingerprints import fingerprint, legacy_fingerprint, semantic_facts
from receipts.receipt.invoice_values import UnusableInvoice
from receipts.receipt.money import is_amount
from receipts.receipt.payload import read_render_input
from receipts.receipt.stored_invoice import stored_invoice


@dataclass(frozen=True, kw_only=True)
class Ignored:
    reason: str


@dataclass(frozen=True, kw_only=True)
class BooksCopy:
    """The row of a receipt's copy for the books (receipts.receipt.books_copy)."""

    message_key: str
    purpose: str
    recipient: str  # RECEIPTS_COPY_TO
    render_input: dict[str, Any]
    fingerprint: str


@dataclass(frozen=True, kw_only=True)
class ReceiptJob:
    message_key: str
    invoice_id: str
    recipient: str  # the one address the email goes to
    render_input: dict[str, Any]  # what the worker renders the email from
    fingerprint: str  # v2: what the customer is told (see semantic_facts)
    # The fingerprint earlier releases stored for the same event: a stored row
    # equal to either is a duplicate, never a conflict.
    legacy_fingerprint: str
    purpose: str = INVOICE_PAID
    # Inserted with this row when RECEIPTS_COPY_TO is set, and only then.
    books_copy: BooksCopy | None = None
    # The refund ids this email tells about (receipts.receipt.refunds): each
    # refund gets one email, a refund receipt or the credit note carrying it.
    claims: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class UnsendableReceipt:
    message_key: str
    invoice_id: str
    reason: str
    fingerprint: str
    legacy_fingerprint: str
    # What the email would be rendered from: kept with the review row, so that
    # `receipts review resend KEY --to ADDRESS` can send it to a corrected address.
    render_input: dict[str, Any]
    purpose: str = INVOICE_PAID
    claims: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Several:
    """One event that means several emails: a ``charge.refunded`` naming several refunds.

    Ingest stores them in one transaction; each collapses onto its own key.
    """

    decisions: tuple[OneDecision, ...]


OneDecision = Ignored | ReceiptJob | UnsendableReceipt
Decision = OneDecision | Several


def is_zero_value(invoice: dict[str, Any]) -> bool:
    """Whether the invoice asked for nothing: a zero (or negative) ``total``.

    Trials and 100 % coupons. Not a zero ``amount_paid``: an invoice paid
    entirely from the customer's credit balance, or marked as paid outside
    Stripe, is a purchase, and its customer gets a receipt. Payloads without
    a total fall back on the amount paid.
    """
    total = invoice.get("total")
    if is_amount(total):
        assert isinstance(total, int)
        return total <= 0
    paid = invoice.get("amount_paid")
    return is_amount(paid) and paid == 0


def derive_receipt(
    header: EventHeader,
    *,
    email_from: str,
    reply_to: str | None = None,
    send_zero_value: bool = False,
    api_facts: ApiFacts | None = None,
) -> OneDecision:
    """Decide what one verified event means for the outbox.

    ``api_facts``, when ingest could look them up, add the payment method and
    choose the language from the customer's preferred locales.
    """
    if header.event_type != "invoice.paid":
        return Ignored(reason="event_type_not_handled")
    invoice = header.data_object
    invoice_id = invoice.get("id")
    if not is_stripe_id(invoice_id, "in_"):
        raise MalformedEvent("invoice.paid event has no valid invoice id in 'data.object.id'")
    if invoice.get("status") != "paid":
        return Ignored(reason="invoice_not_paid")
    try:
        key = message_key(header.account, header.livemode, invoice_id)
    except InvalidMessageKey as too_long:
        raise MalformedEvent(str(too_long)) from None

    if is_zero_value(invoice) and not send_zero_value:
        return Ignored(reason="zero_value")

    meaning = fingerprint(semantic_facts(invoice_id, invoice))
    legacy = legacy_fingerprint(invoice_id, invoice)
    render_input = {
        "invoice": stored_invoice(invoice),
        "created": header.created,
        "from": email_from,
        "reply_to": reply_to,
        "api_facts": api_facts_document(api_facts),
    }
    try:
        facts = read_render_input(render_input)
    except UnusableInvoice as unusable:
        return UnsendableReceipt(
            message_key=key,
            invoice_id=invoice_id,
            reason=unusable.reason,
            fingerprint=meaning,
            legacy_fingerprint=legacy,
            render_input=render_input,
        )
    return ReceiptJob(
        message_key=key,
        invoice_id=invoice_id,
        recipient=facts.to,
        render_input=render_input,
        fingerprint=meaning,
        legacy_fingerprint=legacy,
    )
