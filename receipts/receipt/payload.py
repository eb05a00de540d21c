"""The frozen email of a receipt, made from its stored render input.

Every source of a receipt (a webhook, a thin event, backfill, reconcile)
stores what the email is made from (``render_input``); the worker calls
:func:`render_payload` once, at the row's first claim, and freezes the result
before any send; ``receipts preview`` and ``receipts doctor`` call the same
function. The payload holds only what the product writes (docs/architecture.md,
"The frozen payload and the fingerprint").

One function renders every kind of email of an invoice, by the stored
input's ``kind``: none for the receipt of the paid invoice, ``"refund"`` for
a refund receipt, ``"credit_note"`` for a credit note. Each goes to the
invoice's ``customer_email``, in the customer's language, with the same
payload shape.
"""

from __future__ import annotations

from typing import Any

from receipts.message_keys import provider_tag
from receipts.receipt.after_payment import CREDIT_NOTE, REFUND, read_credit_note, read_refund
from receipts.receipt.api_facts import ApiFacts, api_facts_from_document
from receipts.receipt.invoice_facts import ReceiptFacts, read_invoice
from receipts.receipt.invoice_values import INVALID_AMOUNTS, UnusableInvoice
from receipts.receipt.pdf import REFUND as REFUND_PDF
from receipts.receipt.pdf import attachment, receipt_pdf
from receipts.receipt.pdf_refund import refund_pdf
from receipts.receipt.rendering import EmailContent, Renderer


def render_payload(key: str, render_input: dict[str, Any], renderer: Renderer) -> dict[str, Any]:
    """The email of ``key`` as the provider is sent it.

    A pure function of the stored input and the templates, so the result does
    not depend on where it runs. Raises UnusableInvoice (ReceiptDoesNotAddUp
    among them: the rows would not add up) or what a template raises if the
    input cannot make an email.
    """
    kind = render_input.get("kind")
    if kind == REFUND:
        return _refund_payload(key, render_input, renderer)
    if kind == CREDIT_NOTE:
        return _credit_note_payload(key, render_input, renderer)
    if kind is not None:
        raise UnusableInvoice(INVALID_AMOUNTS, detail="unknown kind of email")
    facts = read_render_input(render_input)
    api_facts = api_facts_from_document(render_input.get("api_facts"))
    how = {
        "locale": renderer.choose_locale(api_facts.preferred_locales),
        "payment_method": api_facts.payment_method,
        "receipt_number": api_facts.receipt_number,
        "sender": render_input["from"],
    }
    content = renderer.render(facts, **how)
    payload = email_payload(
        content,
        key,
        email_from=render_input["from"],
        reply_to=render_input.get("reply_to"),
        # a copy for the books goes to its own address (receipts.receipt.books_copy)
        to=render_input.get("copy_to") or facts.to,
    )
    if renderer.attach_pdf:  # RECEIPTS_ATTACH_PDF
        pdf = receipt_pdf(renderer, facts, **how)
        payload["attachments"] = [attachment(pdf, facts.number, facts.invoice_id)]
    return payload


def _refund_payload(key: str, render_input: dict[str, Any], renderer: Renderer) -> dict[str, Any]:
    """A refund receipt: the refund, where the money goes, the invoice it belongs to.

    With RECEIPTS_ATTACH_PDF it carries the same as a PDF, ``refund-<invoice number>.pdf``
    (the copy for the books too: it is rendered from the same input).
    """
    facts = read_refund(render_input)
    api_facts = api_facts_from_document(render_input.get("api_facts"))
    how = {
        "locale": renderer.choose_locale(api_facts.preferred_locales),
        "payment_method": api_facts.payment_method or facts.method,
        "sender": render_input["from"],
    }
    payload = _payload_of(renderer.render_refund(facts, **how), key, render_input, facts.invoice.to)
    if renderer.attach_pdf:  # RECEIPTS_ATTACH_PDF
        pdf = refund_pdf(renderer, facts, **how)
        invoice = facts.invoice
        payload["attachments"] = [
            attachment(pdf, invoice.number, invoice.invoice_id, document=REFUND_PDF)
        ]
    return payload


def _credit_note_payload(
    key: str, render_input: dict[str, Any], renderer: Renderer
) -> dict[str, Any]:
    """A credit note: its lines, its total, how it was settled."""
    facts = read_credit_note(render_input)
    api_facts: ApiFacts = api_facts_from_document(render_input.get("api_facts"))
    content = renderer.render_credit_note(
        facts,
        locale=renderer.choose_locale(api_facts.preferred_locales),
        payment_method=api_facts.payment_method,
        sender=render_input["from"],
    )
    return _payload_of(content, key, render_input, facts.invoice.to)


def _payload_of(
    content: EmailContent, key: str, render_input: dict[str, Any], to: str
) -> dict[str, Any]:
    return email_payload(
        content,
        key,
        email_from=render_input["from"],
        reply_to=render_input.get("reply_to"),
        # a copy for the books goes to its own address (receipts.receipt.books_copy)
        to=render_input.get("copy_to") or to,
    )


def read_render_input(render_input: dict[str, Any]) -> ReceiptFacts:
    """The receipt's facts from its stored input; UnusableInvoice if it cannot make one."""
    invoice = render_input["invoice"]
    known = api_facts_from_document(render_input.get("api_facts"))
    lines = list(known.all_lines) if known.all_lines is not None else None
    return read_invoice(
        invoice["id"], invoice, render_input["created"], all_lines=lines, api_facts=known
    )


def email_payload(
    content: EmailContent, key: str, *, email_from: str, reply_to: str | None, to: str
) -> dict[str, Any]:
    """The JSON the provider gets: only the fields the product writes."""
    payload: dict[str, Any] = {
        "from": email_from,
        "to": [to],
        "subject": content.subject,
        "text": content.text,
        "html": content.html,
        "tags": [{"name": "message_key", "value": provider_tag(key)}],
    }
    if reply_to:
        payload["reply_to"] = reply_to
    return payload
