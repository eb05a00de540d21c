"""The frozen email of a receipt, made from its stored render input.

Every source of a receipt (a webhook, a thin event, backfill, reconcile)
stores what the email is made from (``render_input``); the worker calls
:func:`render_payload` once, at the row's first claim, and freezes the result
before any send; ``receipts preview`` and ``receipts doctor`` call the same
function. The payload holds only what the product writes (docs/architecture.md,
"The frozen payload and the fingerprint").
"""

from __future__ import annotations

from typing import Any

from receipts.message_keys import provider_tag
from receipts.receipt.api_facts import api_facts_from_document
from receipts.receipt.invoice_facts import ReceiptFacts, read_invoice
from receipts.receipt.pdf import attachment, receipt_pdf
from receipts.receipt.rendering import EmailContent, Renderer


def render_payload(key: str, render_input: dict[str, Any], renderer: Renderer) -> dict[str, Any]:
    """The email of ``key`` as the provider is sent it.

    A pure function of the stored input and the templates, so the result does
    not depend on where it runs. Raises UnusableInvoice (ReceiptDoesNotAddUp
    among them: the rows would not add up) or what a template raises if the
    input cannot make an email.
    """
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
