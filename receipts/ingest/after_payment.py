"""Refund and credit-note events: look up what their email needs, then derive it.

A refund event names a refund (``refund.*``) or a charge (``charge.refunded``),
never the paid invoice with its customer's address, so every such email needs
``STRIPE_API_KEY``: without one the event is recorded as ignored
(``needs_stripe_api_key``) and ``receipts status`` counts it. With a key:

1. the refunds: the event's own (``refund.*``), the charge's ``refunds.data``,
   or ``GET /v1/refunds?charge=`` (API versions since 2022-11-15 list none);
2. the invoice: ``charge.invoice`` (versions before 2025-03-31.basil), else the
   invoice payments of the PaymentIntent
   (``GET /v1/invoice_payments?payment[type]=payment_intent&payment[payment_intent]=``);
   no invoice: ignored (``refund_without_invoice``);
3. the invoice itself and its API facts (language, payment method), as for a receipt;
4. the invoice's credit notes: a refund that a credit note carries is that
   credit note's email (the same key ``credit_note.created`` gives).

A failed look-up raises :class:`receipts.stripe_api.client.ApiError` (one of
the invoice's facts past the time budget: ``OutOfTime``); the webhook answers
503 so that Stripe delivers the event again later.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from receipts.receipt.api_facts import ApiFacts
from receipts.receipt.derivation import Decision, Ignored, ReceiptJob, Several, UnsendableReceipt
from receipts.receipt.event import EventHeader, MalformedEvent
from receipts.receipt.refunds import (
    CREDIT_NOTE_EVENTS,
    INVOICE_NOT_FOUND,
    NEEDS_STRIPE_API_KEY,
    NO_SUCCEEDED_REFUND,
    REFUND_WITHOUT_INVOICE,
    Sender,
    charge_invoice_id,
    credit_note_ignored,
    credit_note_refund_ids,
    derive_credit_note,
    derive_refund,
    listed_refunds,
    object_id,
    refund_ignored,
)
from receipts.stripe_api.client import Deadline, Json, NotFound, Scope, StripeApi
from receipts.stripe_api.facts import enrich

One = Ignored | ReceiptJob | UnsendableReceipt


@dataclass(frozen=True, kw_only=True)
class PaidInvoice:
    """The refund's or credit note's invoice as the API gave it, with its facts."""

    invoice: Json
    facts: ApiFacts
    scope: Scope


class AfterPayment:
    """Derives refund receipts and credit notes, looking up what they need."""

    def __init__(
        self,
        api: StripeApi | None,
        sender: Sender,
        *,
        budget_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.sender = sender
        self._budget = budget_seconds
        self._clock = clock

    def derive(self, header: EventHeader, scope: Scope) -> Decision:
        """What one refund or credit-note event means; may raise MalformedEvent or ApiError."""
        if header.event_type in CREDIT_NOTE_EVENTS:
            return self._credit_note(header, header.data_object, scope)
        if header.event_type == "charge.refunded":
            return self._charge_refunded(header, header.data_object, scope)
        ignored = refund_ignored(header.data_object)
        if ignored is not None:
            return ignored
        return self._refund(header, header.data_object, None, scope)

    # --- credit notes -----------------------------------------------------------------

    def _credit_note(self, header: EventHeader, note: Json, scope: Scope) -> Decision:
        ignored = credit_note_ignored(note)
        if ignored is not None:
            return ignored
        invoice_id = object_id(note.get("invoice"), "in_")
        if invoice_id is None:
            raise MalformedEvent("credit note names no invoice")
        paid = self._paid_invoice(invoice_id, scope)
        if isinstance(paid, Ignored):
            return paid
        return derive_credit_note(
            header, note, paid.invoice, sender=self.sender, api_facts=paid.facts
        )

    # --- refunds ----------------------------------------------------------------------

    def _charge_refunded(self, header: EventHeader, charge: Json, scope: Scope) -> Decision:
        """One decision per succeeded refund the charge has (earlier ones are duplicates)."""
        if self.api is None:
            return Ignored(reason=NEEDS_STRIPE_API_KEY)
        charge_id = object_id(charge, "ch_") or object_id(charge, "py_")
        if charge_id is None:
            raise MalformedEvent("charge.refunded event has no valid charge id")
        refunds = listed_refunds(charge)
        if refunds is None:
            refunds = self.api.refunds_of_charge(charge_id, scope)
        succeeded = [refund for refund in refunds if refund_ignored(refund) is None]
        if not succeeded:
            return Ignored(reason=NO_SUCCEEDED_REFUND)
        decisions = [self._refund(header, refund, charge, scope) for refund in succeeded]
        return decisions[0] if len(decisions) == 1 else Several(decisions=tuple(decisions))

    def _refund(self, header: EventHeader, refund: Json, charge: Json | None, scope: Scope) -> One:
        if self.api is None:
            return Ignored(reason=NEEDS_STRIPE_API_KEY)
        invoice_id = self._invoice_of_refund(refund, charge, scope)
        if invoice_id is None:
            return Ignored(reason=REFUND_WITHOUT_INVOICE)
        paid = self._paid_invoice(invoice_id, scope)
        if isinstance(paid, Ignored):
            return paid
        note = self._credit_note_carrying(str(refund.get("id")), invoice_id, scope)
        if note is not None:
            # The credit note's email tells about this refund: the same key and
            # fingerprint as its credit_note.created gives, whichever comes first.
            return derive_credit_note(
                header, note, paid.invoice, sender=self.sender, api_facts=paid.facts
            )
        return derive_refund(header, refund, paid.invoice, sender=self.sender, api_facts=paid.facts)

    def _invoice_of_refund(self, refund: Json, charge: Json | None, scope: Scope) -> str | None:
        """``charge.invoice`` when the event's version has it, else the invoice payments
        of the refund's PaymentIntent."""
        assert self.api is not None
        if charge is not None and charge_invoice_id(charge) is not None:
            return charge_invoice_id(charge)
        payment_intent = object_id(refund.get("payment_intent"), "pi_")
        if payment_intent is None and charge is not None:
            payment_intent = object_id(charge.get("payment_intent"), "pi_")
        if payment_intent is None:
            return None
        for payment in self.api.invoice_payments_of_payment_intent(payment_intent, scope):
            invoice_id = object_id(payment.get("invoice"), "in_")
            if invoice_id is not None and payment.get("status") in ("paid", None):
                return invoice_id
        return None

    def _credit_note_carrying(self, refund_id: str, invoice_id: str, scope: Scope) -> Json | None:
        """The invoice's credit note that carries this refund, if one does."""
        assert self.api is not None
        for note in self.api.credit_notes_of_invoice(invoice_id, scope):
            if refund_id in credit_note_refund_ids(note) and credit_note_ignored(note) is None:
                return note
        return None

    # --- the invoice --------------------------------------------------------------------

    def _paid_invoice(self, invoice_id: str, scope: Scope) -> PaidInvoice | Ignored:
        if self.api is None:
            return Ignored(reason=NEEDS_STRIPE_API_KEY)
        try:
            invoice: dict[str, Any] = self.api.invoice(invoice_id, scope)
        except NotFound:
            return Ignored(reason=INVOICE_NOT_FOUND)
        deadline = None if self._budget is None else Deadline.after(self._budget, self._clock)
        enriched = enrich(self.api, invoice, scope, deadline=deadline)
        return PaidInvoice(invoice=enriched.invoice, facts=enriched.facts, scope=scope)
