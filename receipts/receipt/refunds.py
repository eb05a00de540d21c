"""Refund receipts and credit notes: what a refund or credit-note event means, pure.

Each refund gets one email, whatever events mention it and in whatever order
(docs/architecture.md, "Refunds and credit notes"): its key is
``{account}/{mode}/{invoice}/refund-{re_…}``, or, when a credit note carries
the refund, the credit note's ``credit-note-{cn_…}``. A decision names the
refund ids its email tells about (``claims``); ingest records them in
``refund_claims`` with the row, so the first email to commit owns each refund.

These functions read what ingest looked up (the refund, the paid invoice as
the API returned it, the API's facts) and return the decision; the look-ups
are :mod:`receipts.ingest.after_payment`'s. The render input is the one the
emails are rendered from: a receipt's keys plus ``kind`` and the Stripe
Refund or CreditNote object as Stripe gave it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from receipts.message_keys import (
    InvalidMessageKey,
    credit_note_purpose,
    message_key,
    refund_purpose,
)
from receipts.receipt.api_facts import ApiFacts, api_facts_document
from receipts.receipt.derivation import Ignored, ReceiptJob, UnsendableReceipt
from receipts.receipt.event import EventHeader, MalformedEvent, is_stripe_id
from receipts.receipt.fingerprints import (
    credit_note_facts,
    fingerprint,
    recipients_of,
    refund_facts,
)
from receipts.receipt.invoice_facts import recipient_of
from receipts.receipt.invoice_values import UnusableInvoice

REFUND_EVENTS = frozenset({"charge.refunded", "refund.created", "refund.updated"})
CREDIT_NOTE_EVENTS = frozenset({"credit_note.created"})
AFTER_PAYMENT_EVENTS = REFUND_EVENTS | CREDIT_NOTE_EVENTS

REFUND = "refund"  # render_input["kind"] of a refund receipt
CREDIT_NOTE = "credit_note"  # render_input["kind"] of a credit note

# Why a refund or credit-note event makes no email (stripe_events.detail).
NEEDS_STRIPE_API_KEY = "needs_stripe_api_key"
REFUND_NOT_SUCCEEDED = "refund_not_succeeded"
REFUND_WITHOUT_INVOICE = "refund_without_invoice"
REFUND_IN_CREDIT_NOTE = "refund_in_credit_note"
REFUND_ALREADY_EMAILED = "refund_already_emailed"
NO_SUCCEEDED_REFUND = "no_succeeded_refund"
CREDIT_NOTE_BEFORE_PAYMENT = "credit_note_before_payment"
CREDIT_NOTE_VOID = "credit_note_void"
INVOICE_NOT_PAID = "invoice_not_paid"
INVOICE_NOT_FOUND = "invoice_not_found"


@dataclass(frozen=True, kw_only=True)
class Sender:
    """Who the emails come from, as configured."""

    email_from: str
    reply_to: str | None = None


def object_id(value: object, prefix: str) -> str | None:
    """An id Stripe gives either as a string or, expanded, as an object with ``id``."""
    found = value.get("id") if isinstance(value, dict) else value
    return found if is_stripe_id(found, prefix) else None


def refund_id_of(refund: dict[str, Any]) -> str:
    """The refund's ``re_…`` id (a ``pyr_…`` for some payment methods); MalformedEvent without."""
    found = refund.get("id")
    if is_stripe_id(found, "re_") or is_stripe_id(found, "pyr_"):
        return found
    raise MalformedEvent("refund event has no valid refund id in 'data.object.id'")


def charge_invoice_id(charge: dict[str, Any]) -> str | None:
    """``charge.invoice``: the charge's invoice on API versions before 2025-03-31.basil."""
    return object_id(charge.get("invoice"), "in_")


def listed_refunds(charge: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The refunds a charge lists itself, or None when it lists none or not all of them.

    API versions since 2022-11-15 leave ``charge.refunds`` out; a list with
    ``has_more`` is cut short. Either way the API is asked.
    """
    listing = charge.get("refunds")
    if not isinstance(listing, dict) or listing.get("has_more") is True:
        return None
    data = listing.get("data")
    if not isinstance(data, list):
        return None
    return [refund for refund in data if isinstance(refund, dict)]


def credit_note_refund_ids(note: dict[str, Any]) -> tuple[str, ...]:
    """The refunds a credit note carries: ``refunds[].refund`` (2025-03-31.basil and
    later), or the one ``refund`` of earlier versions; each an id or an expanded object."""
    found: list[str] = []
    entries = note.get("refunds")
    for entry in entries if isinstance(entries, list) else ():
        refund = object_id(entry.get("refund"), "re_") if isinstance(entry, dict) else None
        if refund is not None:
            found.append(refund)
    single = object_id(note.get("refund"), "re_")
    if single is not None:
        found.append(single)
    return tuple(sorted(set(found)))


def credit_note_ignored(note: dict[str, Any]) -> Ignored | None:
    """Why a credit note gets no email of its own before anything is looked up, if it does not.

    A credit note issued before the payment is already on the receipt (the
    invoice's ``pre_payment_credit_notes_amount``); a void one credits nothing.
    """
    if note.get("type") == "pre_payment":
        return Ignored(reason=CREDIT_NOTE_BEFORE_PAYMENT)
    if note.get("status") == "void":
        return Ignored(reason=CREDIT_NOTE_VOID)
    return None


def refund_ignored(refund: dict[str, Any]) -> Ignored | None:
    """A refund that has not succeeded (pending, requires_action, failed, canceled) moves
    no money yet: its email waits for the ``refund.updated`` that says it succeeded."""
    if refund.get("status") != "succeeded":
        return Ignored(reason=REFUND_NOT_SUCCEEDED)
    return None


def derive_refund(
    header: EventHeader,
    refund: dict[str, Any],
    invoice: dict[str, Any],
    *,
    sender: Sender,
    api_facts: ApiFacts | None,
) -> Ignored | ReceiptJob | UnsendableReceipt:
    """The refund receipt of one succeeded refund of a paid invoice."""
    ignored = refund_ignored(refund)
    if ignored is not None:
        return ignored
    refund_id = refund_id_of(refund)
    purpose = refund_purpose(refund_id)
    render_input = _render_input(header, invoice, sender, api_facts, REFUND, refund)
    meaning = fingerprint(
        refund_facts(purpose, _invoice_id(invoice), refund, recipients_of(invoice))
    )
    return _decision(header, invoice, purpose, render_input, meaning, (refund_id,))


def derive_credit_note(
    header: EventHeader,
    note: dict[str, Any],
    invoice: dict[str, Any],
    *,
    sender: Sender,
    api_facts: ApiFacts | None,
) -> Ignored | ReceiptJob | UnsendableReceipt:
    """The email of a credit note issued on a paid invoice, with the refunds it carries."""
    ignored = credit_note_ignored(note)
    if ignored is not None:
        return ignored
    if invoice.get("status") != "paid":
        return Ignored(reason=INVOICE_NOT_PAID)
    note_id = object_id(note, "cn_")
    if note_id is None:
        raise MalformedEvent("credit note has no valid id in 'data.object.id'")
    purpose = credit_note_purpose(note_id)
    render_input = _render_input(header, invoice, sender, api_facts, CREDIT_NOTE, note)
    meaning = fingerprint(
        credit_note_facts(purpose, _invoice_id(invoice), note, recipients_of(invoice))
    )
    claims = credit_note_refund_ids(note)
    return _decision(header, invoice, purpose, render_input, meaning, claims)


def _invoice_id(invoice: dict[str, Any]) -> str:
    found = object_id(invoice, "in_")
    if found is None:
        raise MalformedEvent("the refund's invoice has no valid id")
    return found


def _render_input(
    header: EventHeader,
    invoice: dict[str, Any],
    sender: Sender,
    api_facts: ApiFacts | None,
    kind: str,
    document: dict[str, Any],
) -> dict[str, Any]:
    """A receipt's render input plus ``kind`` and the Refund or CreditNote as Stripe gave it."""
    return {
        "invoice": invoice,
        "created": header.created,
        "from": sender.email_from,
        "reply_to": sender.reply_to,
        "api_facts": api_facts_document(api_facts),
        "kind": kind,
        kind: document,
    }


def _decision(
    header: EventHeader,
    invoice: dict[str, Any],
    purpose: str,
    render_input: dict[str, Any],
    meaning: str,
    claims: tuple[str, ...],
) -> ReceiptJob | UnsendableReceipt:
    """A pending row to the invoice's customer, or a review row when the invoice has no
    usable recipient (the same rule as a receipt's: ``read_invoice``'s ``to``). The rest
    of the email is checked where it is rendered, at the row's first claim."""
    invoice_id = _invoice_id(invoice)
    try:
        key = message_key(header.account, header.livemode, invoice_id, purpose)
    except InvalidMessageKey as too_long:
        raise MalformedEvent(str(too_long)) from None
    try:
        recipient = recipient_of(invoice)
    except UnusableInvoice as unusable:
        return UnsendableReceipt(
            message_key=key,
            invoice_id=invoice_id,
            reason=unusable.reason,
            fingerprint=meaning,
            legacy_fingerprint=meaning,
            render_input=render_input,
            purpose=purpose,
            claims=claims,
        )
    return ReceiptJob(
        message_key=key,
        invoice_id=invoice_id,
        recipient=recipient,
        render_input=render_input,
        fingerprint=meaning,
        legacy_fingerprint=meaning,
        purpose=purpose,
        claims=claims,
    )
