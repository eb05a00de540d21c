"""From a verified Stripe event to the one receipt it may cause: a pure function.

:func:`derive_receipt` looks only at the event and the settings and returns
what ingest must store:

* :class:`Ignored`: not a paid invoice we send for (other types, zero value);
* :class:`ReceiptJob`: the message key, the frozen email and its fingerprint;
* :class:`UnsendableReceipt`: a paid invoice that cannot yield an email; it
  becomes a ``review`` row so a person sees it, and Stripe is not made to retry.

A malformed event (no invoice id, wrong types where the key comes from) raises
:class:`MalformedEvent`, which the web layer answers with 400.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from receipts.addresses import is_email_address
from receipts.ingest.events import STRIPE_ID as _STRIPE_ID
from receipts.ingest.events import EventHeader, MalformedEvent
from receipts.ingest.rendering import EmailContent, InvoiceFacts, Renderer
from receipts.vocabulary import PURPOSE

MAX_KEY_LENGTH = 256  # Resend's limit for an Idempotency-Key
HOSTED_INVOICE_HOST = "invoice.stripe.com"
PDF_HOSTS = ("pay.stripe.com", "invoice.stripe.com", "files.stripe.com")

_CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_CURRENCY = re.compile(r"[a-z]{3}")


@dataclass(frozen=True, kw_only=True)
class Ignored:
    reason: str


@dataclass(frozen=True, kw_only=True)
class ReceiptJob:
    message_key: str
    invoice_id: str
    payload: dict[str, Any]
    fingerprint: str


@dataclass(frozen=True, kw_only=True)
class UnsendableReceipt:
    message_key: str
    invoice_id: str
    reason: str
    fingerprint: str


Decision = Ignored | ReceiptJob | UnsendableReceipt


def message_key(account: str, livemode: bool, invoice_id: str, purpose: str = PURPOSE) -> str:
    """``{account}/{live|test}/{invoice id}/{purpose}``: one key per message, ever."""
    key = "/".join((account, "live" if livemode else "test", invoice_id, purpose))
    if len(key) > MAX_KEY_LENGTH:
        raise MalformedEvent(f"message key would exceed {MAX_KEY_LENGTH} characters")
    return key


def fingerprint(facts: dict[str, Any]) -> str:
    """A hash of what the email means, not how it is rendered."""
    canonical = json.dumps(facts, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(canonical.encode("ascii")).hexdigest()


def derive_receipt(
    header: EventHeader,
    renderer: Renderer,
    *,
    email_from: str,
    reply_to: str | None = None,
    send_zero_value: bool = False,
) -> Decision:
    """Decide what one verified event means for the outbox."""
    if header.event_type != "invoice.paid":
        return Ignored(reason="event_type_not_handled")
    invoice = header.data_object
    invoice_id = invoice.get("id")
    if (
        not isinstance(invoice_id, str)
        or not invoice_id.startswith("in_")
        or not _STRIPE_ID.fullmatch(invoice_id)
    ):
        raise MalformedEvent("invoice.paid event has no valid invoice id in 'data.object.id'")
    if invoice.get("status") != "paid":
        return Ignored(reason="invoice_not_paid")
    key = message_key(header.account, header.livemode, invoice_id)

    amount = invoice.get("amount_paid")
    valid_amount = isinstance(amount, int) and not isinstance(amount, bool) and amount >= 0
    if valid_amount and amount == 0 and not send_zero_value:
        return Ignored(reason="zero_value")

    semantic = _semantic_facts(invoice_id, invoice)
    problem = _unsendable_reason(invoice, valid_amount)
    if problem is not None:
        return UnsendableReceipt(
            message_key=key,
            invoice_id=invoice_id,
            reason=problem,
            fingerprint=fingerprint(semantic),
        )
    facts = _invoice_facts(invoice_id, invoice, header.created)
    content = renderer.render(facts)
    payload = _resend_payload(content, key, email_from=email_from, reply_to=reply_to, to=facts.to)
    return ReceiptJob(
        message_key=key, invoice_id=invoice_id, payload=payload, fingerprint=fingerprint(semantic)
    )


def _semantic_facts(invoice_id: str, invoice: dict[str, Any]) -> dict[str, Any]:
    """What identifies the send: recipients, purpose, invoice, amount, link."""
    email = invoice.get("customer_email")
    return {
        "purpose": PURPOSE,
        "invoice_id": invoice_id,
        "to": [email.strip().lower()] if isinstance(email, str) else [],
        "amount": invoice.get("amount_paid"),
        "currency": invoice.get("currency"),
        "hosted_invoice_url": invoice.get("hosted_invoice_url"),
    }


def _unsendable_reason(invoice: dict[str, Any], valid_amount: bool) -> str | None:
    email = invoice.get("customer_email")
    if not isinstance(email, str) or not email.strip():
        return "missing_customer_email"
    if not is_email_address(email.strip()):
        return "invalid_customer_email"
    if not _is_stripe_url(invoice.get("hosted_invoice_url"), (HOSTED_INVOICE_HOST,)):
        return "invalid_hosted_invoice_url"
    if not valid_amount:
        return "invalid_amount_paid"
    currency = invoice.get("currency")
    if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
        return "invalid_currency"
    return None


def _is_stripe_url(value: object, hosts: tuple[str, ...]) -> bool:
    if not isinstance(value, str) or len(value) > 2048 or _CONTROL_CHARACTERS.search(value):
        return False
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme == "https" and parts.hostname in hosts and parts.port is None


def _is_timestamp(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**33


def _clean_text(value: object, limit: int = 200) -> str | None:
    """A display string without control characters, or None if there is none."""
    if not isinstance(value, str):
        return None
    cleaned = _CONTROL_CHARACTERS.sub("", value).strip()[:limit]
    return cleaned or None


def _invoice_facts(invoice_id: str, invoice: dict[str, Any], created: int | None) -> InvoiceFacts:
    number = _clean_text(invoice.get("number"), 100)
    pdf = invoice.get("invoice_pdf")
    name = _clean_text(invoice.get("customer_name"))
    transitions = invoice.get("status_transitions")
    paid_at = transitions.get("paid_at") if isinstance(transitions, dict) else None
    if not _is_timestamp(paid_at):
        paid_at = created if _is_timestamp(created) else None
    return InvoiceFacts(
        invoice_id=invoice_id,
        number=number or invoice_id,
        to=str(invoice["customer_email"]).strip(),
        customer_name=name,
        amount=int(invoice["amount_paid"]),
        currency=str(invoice["currency"]),
        paid_at=paid_at,
        hosted_invoice_url=str(invoice["hosted_invoice_url"]),
        invoice_pdf=pdf if _is_stripe_url(pdf, PDF_HOSTS) else None,
    )


def resend_tag_value(key: str) -> str:
    """Resend tags allow ASCII letters, digits, '_' and '-' (256 characters at most)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", key)[:256]


def _resend_payload(
    content: EmailContent, key: str, *, email_from: str, reply_to: str | None, to: str
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "from": email_from,
        "to": [to],
        "subject": content.subject,
        "text": content.text,
        "html": content.html,
        "tags": [{"name": "message_key", "value": resend_tag_value(key)}],
    }
    if reply_to:
        payload["reply_to"] = reply_to
    return payload
