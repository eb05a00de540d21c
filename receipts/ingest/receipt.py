"""From a verified Stripe event to the one receipt it may cause: a pure function.

:func:`derive_receipt` looks only at the event and the settings and returns
what ingest must store:

* :class:`Ignored`: not a paid invoice we send for (other types, zero value);
* :class:`ReceiptJob`: the message key, its fingerprint, and the email: rendered
  here when a renderer is given, else the input the worker renders it from
  at the first claim (:func:`render_payload`);
* :class:`UnsendableReceipt`: a paid invoice that cannot yield an email; it
  becomes a ``review`` row so a person sees it, and Stripe is not made to retry.
  The row keeps what the email would be rendered from, so a person who knows
  the right address can have it sent there (``receipts review resend --to``).

A malformed event (no invoice id, wrong types where the key comes from) raises
:class:`MalformedEvent`, which the web layer answers with 400.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from receipts.ingest.api_facts import ApiFacts, api_facts_document, api_facts_from_document
from receipts.ingest.events import STRIPE_ID as _STRIPE_ID
from receipts.ingest.events import EventHeader, MalformedEvent
from receipts.ingest.invoice_facts import ReceiptFacts, read_invoice
from receipts.ingest.invoice_values import UnusableInvoice
from receipts.ingest.money import is_amount
from receipts.vocabulary import PURPOSE

if TYPE_CHECKING:
    from receipts.ingest.rendering import EmailContent, Renderer

MAX_KEY_LENGTH = 256  # Resend's limit for an Idempotency-Key


@dataclass(frozen=True, kw_only=True)
class Ignored:
    reason: str


@dataclass(frozen=True, kw_only=True)
class ReceiptJob:
    message_key: str
    invoice_id: str
    recipient: str  # the one address the email goes to
    # Exactly one of the two: the frozen email, or what it is rendered from.
    payload: dict[str, Any] | None
    render_input: dict[str, Any] | None
    fingerprint: str  # v2: what the customer is told (see semantic_facts)
    # The fingerprint earlier releases stored for the same event: a stored row
    # equal to either is a duplicate, never a conflict.
    legacy_fingerprint: str


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


Decision = Ignored | ReceiptJob | UnsendableReceipt


def message_key(account: str, livemode: bool, invoice_id: str, purpose: str = PURPOSE) -> str:
    """``{account}/{live|test}/{invoice id}/{purpose}``: one key per message, ever."""
    key = "/".join((account, "live" if livemode else "test", invoice_id, purpose))
    if len(key) > MAX_KEY_LENGTH:
        raise MalformedEvent(f"message key would exceed {MAX_KEY_LENGTH} characters")
    return key


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
        "purpose": PURPOSE,
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
        "purpose": PURPOSE,
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


def derive_receipt(
    header: EventHeader,
    renderer: Renderer | None,
    *,
    email_from: str,
    reply_to: str | None = None,
    send_zero_value: bool = False,
    api_facts: ApiFacts | None = None,
) -> Decision:
    """Decide what one verified event means for the outbox.

    ``api_facts``, when ingest could look them up, add the payment method and
    choose the language from the customer's preferred locales. Without a
    ``renderer`` the email is not rendered here: the job carries what
    :func:`render_payload` needs, and the worker renders it once, at the
    first claim (docs/architecture.md, "The frozen payload and the fingerprint").
    """
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
    if amount == 0 and is_amount(amount) and not send_zero_value:
        return Ignored(reason="zero_value")

    meaning = fingerprint(semantic_facts(invoice_id, invoice))
    legacy = legacy_fingerprint(invoice_id, invoice)
    render_input = {
        "invoice": invoice,
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
        payload=None if renderer is None else _render(key, render_input, facts, renderer),
        render_input=render_input if renderer is None else None,
        fingerprint=meaning,
        legacy_fingerprint=legacy,
    )


def render_payload(key: str, render_input: dict[str, Any], renderer: Renderer) -> dict[str, Any]:
    """The frozen email of a receipt whose rendering was left to its first claim.

    The same function of the same stored input as a render at ingest, so the
    result does not depend on where it runs. Raises UnusableInvoice (or what a
    template raises) if the input cannot make an email.
    """
    return _render(key, render_input, read_render_input(render_input), renderer)


def read_render_input(render_input: dict[str, Any]) -> ReceiptFacts:
    """The receipt's facts from what ingest stored; UnusableInvoice if no email can be made."""
    invoice = render_input["invoice"]
    lines = (render_input.get("api_facts") or {}).get("all_lines")
    return read_invoice(invoice["id"], invoice, render_input["created"], all_lines=lines)


def _render(
    key: str, render_input: dict[str, Any], facts: ReceiptFacts, renderer: Renderer
) -> dict[str, Any]:
    api_facts = api_facts_from_document(render_input.get("api_facts"))
    content = renderer.render(
        facts,
        locale=renderer.choose_locale(api_facts.preferred_locales),
        payment_method=api_facts.payment_method,
    )
    return _resend_payload(
        content,
        key,
        email_from=render_input["from"],
        reply_to=render_input.get("reply_to"),
        to=facts.to,
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
