"""What support looks a receipt up by: invoice number, customer address, amount.

Ingest stores these next to each outbox row and each Stripe event
(``sql/006_lookups_and_history.sql``), so ``receipts show ACME-0102`` and
``receipts review list`` can name the invoice as support knows it. They are
taken from the event as Stripe sent it, cleaned only so that they can be
stored and printed on one line: a malformed address is kept (it is why the
receipt is in review), control characters and absurd lengths are not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CURRENCY = re.compile(r"[a-z]{3}")
_BIGINT = 2**63


@dataclass(frozen=True, kw_only=True)
class InvoiceSummary:
    """The invoice's id, number, customer address, amount and currency, each if usable."""

    invoice_id: str | None = None
    number: str | None = None
    customer_email: str | None = None
    amount: int | None = None
    currency: str | None = None

    def columns(self) -> dict[str, Any]:
        """The parameters ingest.sql takes for them."""
        return {
            "invoice_number": self.number,
            "customer_email": self.customer_email,
            "amount": self.amount,
            "currency": self.currency,
        }


NO_INVOICE = InvoiceSummary()


def summarize(data_object: dict[str, Any], payload: dict[str, Any] | None) -> InvoiceSummary:
    """The summary of an event's invoice; the frozen email's recipient wins when there is one.

    The recipient can differ from the invoice's ``customer_email``: with a
    Stripe API key, an invoice without one takes the customer's current address.
    """
    invoice_id = data_object.get("id")
    if not (isinstance(invoice_id, str) and invoice_id.startswith("in_")):
        return NO_INVOICE
    return InvoiceSummary(
        invoice_id=_one_line(invoice_id, 255),
        number=_one_line(data_object.get("number"), 100),
        customer_email=_recipient(payload) or _one_line(data_object.get("customer_email"), 320),
        amount=_amount(data_object.get("amount_paid")),
        currency=_currency(data_object.get("currency")),
    )


def _recipient(payload: dict[str, Any] | None) -> str | None:
    recipients = payload.get("to") if payload else None
    if isinstance(recipients, list) and len(recipients) == 1 and isinstance(recipients[0], str):
        # As sent, unchanged: the least-privilege policy on email_outbox checks
        # that a new row's recipient is exactly its customer_email.
        return recipients[0]
    return None


def _one_line(value: object, limit: int) -> str | None:
    if not isinstance(value, str):
        return None
    cleaned = _CONTROL.sub("", value).strip()[:limit]
    return cleaned or None


def _amount(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and -_BIGINT < value < _BIGINT:
        return value
    return None


def _currency(value: object) -> str | None:
    if isinstance(value, str) and _CURRENCY.fullmatch(value):
        return value
    return None
