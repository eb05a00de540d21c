"""The one place a Stripe invoice becomes a receipt decision, with the API's facts when it may.

Every way an invoice arrives (a snapshot webhook, a thin notification,
``receipts backfill``, ``receipts reconcile``) goes through
:meth:`ReceiptDeriver.derive`, so one invoice gives one message key and one
fingerprint whichever way it came. With ``STRIPE_API_KEY`` set, a paid invoice
that will get a receipt is first completed from the API
(:mod:`receipts.stripe_api.facts`); without a key, or when a look-up fails, it
is derived exactly as it would be without one. Inside a webhook request the
look-ups share a budget: past it :class:`receipts.stripe_api.client.OutOfTime`
is raised and nothing is derived from what was found so far.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from receipts.config import Settings
from receipts.ingest.after_payment import AfterPayment
from receipts.receipt.api_facts import ApiFacts
from receipts.receipt.books_copy import with_books_copy
from receipts.receipt.derivation import Decision, Ignored, Several, derive_receipt, is_zero_value
from receipts.receipt.event import EventHeader
from receipts.receipt.refunds import AFTER_PAYMENT_EVENTS, Sender
from receipts.stripe_api.client import Deadline, Scope, StripeApi
from receipts.stripe_api.facts import enrich

# Inside a webhook request the look-ups of one event, every page included, share this
# budget; past it the event is answered 503 and finished later without a budget.
IN_REQUEST_BUDGET_SECONDS = 4.0


class ReceiptDeriver:
    """Derives receipts with one set of settings and, optionally, the API.

    Refund and credit-note events go to :class:`receipts.ingest.after_payment.AfterPayment`.

    The emails are not rendered here: every source stores what the email is
    rendered from, and the worker renders it at the row's first claim.
    """

    def __init__(
        self,
        settings: Settings,
        api: StripeApi | None,
        *,
        budget_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.api = api
        self._budget = budget_seconds
        self._clock = clock
        sender = Sender(email_from=settings.email_from or "", reply_to=settings.reply_to)
        self._after_payment = AfterPayment(api, sender, budget_seconds=budget_seconds, clock=clock)

    def derive(self, header: EventHeader, scope: Scope | None = None) -> Decision:
        """Decide what one invoice event means; may raise MalformedEvent like derive_receipt,
        and OutOfTime when the look-ups ran past the budget."""
        mode = "live" if header.livemode else "test"
        if mode not in self.settings.modes:
            # Recorded, so support can see why; never looked up nor emailed.
            return Ignored(reason=f"{mode}_mode_off")
        if header.event_type in AFTER_PAYMENT_EVENTS:
            decision = self._after_payment.derive(header, scope or Scope(account=header.account))
            return self._with_books_copies(decision)
        if self.api is None or not self._will_be_sent(header):
            return self._derive(header, None)
        deadline = None if self._budget is None else Deadline.after(self._budget, self._clock)
        enriched = enrich(
            self.api,
            header.data_object,
            scope or Scope(account=header.account),
            deadline=deadline,
        )
        return self._derive(replace(header, data_object=enriched.invoice), enriched.facts)

    def _derive(self, header: EventHeader, facts: ApiFacts | None) -> Decision:
        decision = derive_receipt(
            header,
            email_from=self.settings.email_from or "",
            reply_to=self.settings.reply_to,
            send_zero_value=self.settings.send_zero_value,
            api_facts=facts,
        )
        return with_books_copy(decision, self.settings.copy_to)

    def _with_books_copies(self, decision: Decision) -> Decision:
        """Each refund receipt with its copy for the books, when RECEIPTS_COPY_TO is set."""
        if not isinstance(decision, Several):
            return with_books_copy(decision, self.settings.copy_to)
        copied = [with_books_copy(one, self.settings.copy_to) for one in decision.decisions]
        return Several(decisions=tuple(one for one in copied if not isinstance(one, Several)))

    def _will_be_sent(self, header: EventHeader) -> bool:
        """Only a paid invoice that is not ignored is worth the API's time."""
        invoice = header.data_object
        if header.event_type != "invoice.paid" or invoice.get("status") != "paid":
            return False
        return self.settings.send_zero_value or not is_zero_value(invoice)
