"""Fingerprints: a hash of what an email tells its customer, not how it is rendered.

A later event with the same message key and the same fingerprint is a
duplicate; a different fingerprint is a conflict (docs/architecture.md, "The
frozen payload and the fingerprint"). The links Stripe re-mints on every
render and the rendered text are left out, so neither a template deploy nor
an honest redelivery is ever a conflict.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from receipts.message_keys import INVOICE_PAID

FINGERPRINT_VERSION = "v2"


def fingerprint(facts: dict[str, Any], prefix: str = f"{FINGERPRINT_VERSION}:sha256:") -> str:
    """A hash of what the email means, not how it is rendered."""
    canonical = json.dumps(facts, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return prefix + hashlib.sha256(canonical.encode("ascii")).hexdigest()


def semantic_facts(invoice_id: str, invoice: dict[str, Any]) -> dict[str, Any]:
    """What the customer is told (docs/architecture.md, "The frozen payload and the fingerprint").

    Recipients, purpose, invoice, currency, amount paid, total and each line's
    amount; not the hosted-invoice or PDF links, whose tokens Stripe re-mints
    each time it renders an invoice, and not the rendered text.
    """
    listing = invoice.get("lines")
    lines = listing.get("data") if isinstance(listing, dict) else None
    return {
        "purpose": INVOICE_PAID,
        "invoice_id": invoice_id,
        "to": _recipients(invoice),
        "currency": _scalar(invoice.get("currency")),
        "amount_paid": _scalar(invoice.get("amount_paid")),
        "total": _scalar(invoice.get("total")),
        "line_amounts": [
            _scalar(line.get("amount")) if isinstance(line, dict) else None for line in lines
        ]
        if isinstance(lines, list)
        else None,
    }


def legacy_fingerprint(invoice_id: str, invoice: dict[str, Any]) -> str:
    """The fingerprint releases before the v2 definition stored (``sha256:…``).

    It covered the hosted invoice link. Rows stored by those releases keep it,
    so ingest treats a stored fingerprint equal to this one as a duplicate too:
    an upgrade must not turn Stripe's redelivery of an old event into a conflict.
    """
    fields = {
        "purpose": INVOICE_PAID,
        "invoice_id": invoice_id,
        "to": _recipients(invoice),
        "amount": invoice.get("amount_paid"),
        "currency": invoice.get("currency"),
        "hosted_invoice_url": invoice.get("hosted_invoice_url"),
    }
    try:
        # Exactly what those releases hashed, whatever the values' types.
        return fingerprint(fields, prefix="sha256:")
    except (RecursionError, ValueError, TypeError):
        # Those releases failed on such a value, so no stored row has it.
        return fingerprint({k: _scalar(v) for k, v in fields.items()}, prefix="sha256:")


def _recipients(invoice: dict[str, Any]) -> list[str]:
    email = invoice.get("customer_email")
    return [email.strip().lower()] if isinstance(email, str) else []


def _scalar(value: object) -> object:
    """A JSON scalar as it is; anything else as its type name, so hashing never recurses."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return f"<{type(value).__name__}>"


def refund_facts(purpose: str, invoice_id: str, refund: dict[str, Any], to: list[str]
                 ) -> dict[str, Any]:  # fmt: skip
    """What a refund receipt tells: which refund, how much, of which invoice, to whom.

    Not its status, reason or the charge's other refunds: a ``refund.updated``
    that only changes those after the refund succeeded is the same email.
    """
    return {
        "purpose": purpose,
        "invoice_id": invoice_id,
        "to": to,
        "refund_id": _scalar(refund.get("id")),
        "amount": _scalar(refund.get("amount")),
        "currency": _scalar(refund.get("currency")),
    }


def credit_note_facts(purpose: str, invoice_id: str, note: dict[str, Any], to: list[str]
                      ) -> dict[str, Any]:  # fmt: skip
    """What a credit-note email tells: which note, its amounts and lines, of which invoice.

    Not its PDF link, which Stripe re-mints like the invoice's.
    """
    listing = note.get("lines")
    lines = listing.get("data") if isinstance(listing, dict) else None
    return {
        "purpose": purpose,
        "invoice_id": invoice_id,
        "to": to,
        "credit_note_id": _scalar(note.get("id")),
        "amount": _scalar(note.get("amount")),
        "total": _scalar(note.get("total")),
        "currency": _scalar(note.get("currency")),
        "line_amounts": [
            _scalar(line.get("amount")) if isinstance(line, dict) else None for line in lines
        ]
        if isinstance(lines, list)
        else None,
    }


def recipients_of(invoice: dict[str, Any]) -> list[str]:
    """The invoice's recipient as fingerprints compare it (trimmed, lower case)."""
    return _recipients(invoice)
