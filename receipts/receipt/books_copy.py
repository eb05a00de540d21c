"""The copy for the books: a receipt's second email, to ``RECEIPTS_COPY_TO``.

Accountants file what the customer was sent. With ``RECEIPTS_COPY_TO`` set,
each receipt and refund receipt gets its own outbox row (purpose
``invoice-paid-copy``, ``refund-…-copy``), inserted with the customer's in
one statement and rendered from the same input, so it carries the same
content (and PDF) with only ``to`` changed. It is its own message key, so it is
sent once and independently: its failure never holds back the customer's
receipt (docs/architecture.md, "The copy for the books").
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from receipts.message_keys import (
    INVOICE_PAID,
    REFUND_PREFIX,
    InvalidMessageKey,
    copy_purpose,
    message_key,
    parse_message_key,
)
from receipts.receipt.derivation import BooksCopy, Decision, ReceiptJob
from receipts.receipt.fingerprints import fingerprint
from receipts.receipt.invoice_values import UnusableInvoice
from receipts.vocabulary import ReviewReason

# The render input's field that makes a row the copy and names where it goes.
COPY_TO = "copy_to"


def with_books_copy(decision: Decision, copy_to: str | None) -> Decision:
    """The decision, with its copy for the books when one is configured and due.

    No copy when the customer's own address is the books' (it would be a
    second identical email to the customer), nor for purposes without one.
    """
    if copy_to is None or not isinstance(decision, ReceiptJob):
        return decision
    if same_address(decision.recipient, copy_to):
        return decision
    key = books_copy_key(decision.message_key)
    if key is None:
        return decision
    copy = BooksCopy(
        message_key=key,
        purpose=parse_message_key(key).purpose,
        recipient=copy_to,
        render_input=copy_render_input(decision.render_input, copy_to),
        fingerprint=copy_fingerprint(decision.fingerprint, copy_to),
    )
    return replace(decision, books_copy=copy)


def has_books_copy(purpose: str) -> bool:
    """Receipts and refund receipts get a copy; copies, credit notes and resends do not."""
    return purpose == INVOICE_PAID or purpose.startswith(REFUND_PREFIX)


def books_copy_key(key: str) -> str | None:
    """The copy's message key; None when the purpose has none or the key would be too long."""
    parts = parse_message_key(key)
    if parts.resend is not None or not has_books_copy(parts.purpose):
        return None
    try:
        return message_key(
            parts.account, parts.livemode, parts.invoice_id, copy_purpose(parts.purpose)
        )
    except InvalidMessageKey:
        return None


def copy_render_input(render_input: dict[str, Any], copy_to: str) -> dict[str, Any]:
    """The customer's render input, addressed to the books."""
    return {**render_input, COPY_TO: copy_to}


def copy_fingerprint(original_fingerprint: str, copy_to: str) -> str:
    """What the copy tells: the customer's email, sent to another address."""
    return fingerprint({"copy_of": original_fingerprint, "to": [copy_to.strip().lower()]})


def copy_recipient(render_input: dict[str, Any], configured: str | None) -> str | None:
    """Where a row's email goes instead of the customer; None for the customer's own.

    The worker sends a copy only to the address its own settings name: a row
    written with any other address (RECEIPTS_COPY_TO changed since, or a row
    not written by ingest) goes to review instead of out.
    """
    address = render_input.get(COPY_TO)
    if address is None:
        return None
    if not isinstance(address, str) or configured is None or address.lower() != configured.lower():
        raise UnusableInvoice(
            ReviewReason.COPY_ADDRESS_NOT_CONFIGURED,
            detail="the copy's address is not RECEIPTS_COPY_TO",
        )
    return address


def same_address(first: str, second: str) -> bool:
    return first.strip().lower() == second.strip().lower()
