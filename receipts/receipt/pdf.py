"""The receipt as a PDF, attached to its email when ``RECEIPTS_ATTACH_PDF`` is true.

What every PDF of the product shares is here too: the attachment (named
``receipt-<invoice number>.pdf``, or ``refund-…`` for a refund receipt,
:mod:`receipts.receipt.pdf_refund`), its bound, and the pieces both
documents are made of (who is billed, the fields shown, where to ask).

The PDF shows what the email shows, from the same view the templates get
(:class:`~receipts.receipt.presentation.ReceiptView`): the same messages of
the receipt's catalog and the same formatted amounts and dates, so every
number reads exactly as in the email. It is rendered with the email, at the
row's first claim, and frozen in the payload as one attachment
(:func:`attachment`): a retry sends the same bytes.

What a customer files: who it is from, the invoice and receipt numbers, when
and how it was paid, both tax ids, who it is billed to, the lines, discounts,
taxes and totals, credit applied, the amount paid, and where to ask. The
links of the email (the hosted invoice page, Stripe's own PDF) are left out:
a PDF is forwarded and filed, and those links need no password.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from babel import Locale

from receipts.receipt.api_facts import PaymentMethod
from receipts.receipt.invoice_facts import ReceiptFacts
from receipts.receipt.payment_methods import N_
from receipts.receipt.pdf_layout import Document, Row, draw
from receipts.receipt.presentation import TIMES, ReceiptView
from receipts.receipt.rendering import Presented, PresentedReceipt, Renderer

CONTENT_TYPE = "application/pdf"
# The base64 of one attachment, at most (about 1.5 MiB of PDF; a receipt is 20-60 kB).
MAX_ATTACHMENT_BASE64 = 2 * 1024 * 1024
# What each document's file is called before its invoice number: two different documents
# about one invoice never share a name in the folder an accountant files them in.
RECEIPT = "receipt"
REFUND = "refund"
FILENAME = re.compile(rf"(?:{RECEIPT}|{REFUND})-[A-Za-z0-9._-]+\.pdf")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True, kw_only=True)
class SupportMessages:
    """Where to ask, worded for one document: with both contacts, the email, the page."""

    both: str
    email: str
    url: str


RECEIPT_SUPPORT = SupportMessages(
    both=N_("Questions about this receipt? Write to %(email)s or visit %(url)s."),
    email=N_("Questions about this receipt? Write to %(email)s."),
    url=N_("Questions about this receipt? Visit %(url)s."),
)


Gettext = Callable[[str], str]


class ReceiptPdfTooLarge(ValueError):
    """The PDF would exceed MAX_ATTACHMENT_BASE64: the row goes to review (render_failed)."""


def receipt_pdf(
    renderer: Renderer,
    facts: ReceiptFacts,
    *,
    locale: str | None = None,
    payment_method: PaymentMethod | None = None,
    receipt_number: str | None = None,
    sender: str | None = None,
) -> bytes:
    """The PDF of ``facts``; ReceiptDoesNotAddUp, as for the email, if its rows would not."""
    presented = renderer.present(
        facts,
        locale=locale,
        payment_method=payment_method,
        receipt_number=receipt_number,
        sender=sender,
    )
    return draw(receipt_document(presented, paid_at=facts.paid_at))


def attachment(
    pdf: bytes, view_number: str | None, invoice_id: str, *, document: str = RECEIPT
) -> dict[str, Any]:
    """The payload's attachment: Resend's shape, which the other providers translate."""
    content = base64.b64encode(pdf).decode("ascii")
    if len(content) > MAX_ATTACHMENT_BASE64:
        raise ReceiptPdfTooLarge(f"{len(content)} base64 characters")
    return {
        "filename": attachment_filename(view_number, invoice_id, document),
        "content": content,
        "content_type": CONTENT_TYPE,
    }


def attachment_filename(number: str | None, invoice_id: str, document: str = RECEIPT) -> str:
    """``receipt-<invoice number>.pdf`` (``refund-…`` for a refund receipt; the invoice id
    without a number), every character outside ``[A-Za-z0-9._-]`` written as ``-``."""
    return f"{document}-{_UNSAFE.sub('-', number or invoice_id)}.pdf"


def document_of(
    presented: Presented[Any], *, title: str, merchant: str | None, **parts: Any
) -> Document:
    """A document in the email's language, headed by who it is from (else by its title)."""
    return Document(
        language=pdf_language(presented.locale),
        title=title,
        heading=merchant or title,
        author=merchant,
        subject=title,
        **parts,
    )


def pdf_language(locale: Locale) -> str:
    """The PDF's /Lang: "ja", "pt-BR"."""
    return str(locale).replace("_", "-")


def shown_fields(fields: Iterable[tuple[str, str | None]]) -> tuple[tuple[str, str], ...]:
    """The labelled fields that have a value, in their order."""
    return tuple((label, value) for label, value in fields if value)


def addressee(name: str | None, address: tuple[str, ...], email: str) -> tuple[str, ...]:
    """Who is billed: name, address lines, email, each that is known."""
    return tuple(part for part in (name, *address, email) if part)


def support_note(
    email: str | None, url: str | None, messages: SupportMessages, _: Gettext
) -> str | None:
    """Where to ask, as the email says it; None without a support address or page."""
    if email and url:
        message = _(messages.both)
    elif email:
        message = _(messages.email)
    elif url:
        message = _(messages.url)
    else:
        return None
    return str(message % {"email": email, "url": url})


def receipt_document(presented: PresentedReceipt, *, paid_at: int | None = None) -> Document:
    """The receipt as a document of finished strings, in the receipt's language."""
    view = presented.view
    _ = presented.translations.gettext
    support = support_note(view.support_email, view.support_url, RECEIPT_SUPPORT, _)
    return document_of(
        presented,
        title=_title(view, _),
        merchant=view.merchant,
        lead=_lead(view, _),
        fields=_fields(view, _),
        addressee_label=_("Billed to"),
        addressee=addressee(view.customer_name, view.customer_address, view.customer_email),
        items_label=_("Items"),
        items=_items(view, presented),
        totals=_totals(view, _),
        notes=tuple(note for note in (view.memo, view.footer, support) if note),
        dated=paid_at,
    )


def _title(view: ReceiptView, _: Gettext) -> str:
    if view.merchant:
        return str(
            _("Receipt from %(merchant)s for invoice %(number)s")
            % {"merchant": view.merchant, "number": view.number}
        )
    return str(_("Receipt for invoice %(number)s") % {"number": view.number})


def _lead(view: ReceiptView, _: Gettext) -> str:
    """The email's first sentence: what was paid, and how."""
    number, total = view.number, view.total
    if view.settlement == "credit_and_payment":
        message = _(
            "Your invoice %(number)s for %(total)s is paid: %(credit)s from your credit "
            "balance, %(charged)s charged."
        )
        values: dict[str, str | None] = {
            "credit": view.credit_applied,
            "charged": view.amount_paid,
        }
    elif view.settlement == "credit":
        message = _("Your invoice %(number)s for %(total)s was paid from your credit balance.")
        values = {}
    elif view.settlement == "out_of_band" and view.merchant:
        message = _("Your invoice %(number)s for %(total)s was marked as paid by %(merchant)s.")
        values = {"merchant": view.merchant}
    elif view.settlement == "nothing_due":
        message = _("Your invoice %(number)s comes to %(total)s: there is nothing to pay.")
        values = {}
    elif view.settlement == "out_of_band":
        message = _("Your invoice %(number)s for %(total)s was marked as paid.")
        values = {}
    elif view.merchant:
        message = _("Thank you! %(merchant)s received your payment of %(amount)s.")
        values = {"merchant": view.merchant, "amount": view.settled}
    else:
        message = _("Thank you! Your payment of %(amount)s has been received.")
        values = {"amount": view.settled}
    return str(message % {"number": number, "total": total, **values})


def _fields(view: ReceiptView, _: Gettext) -> tuple[tuple[str, str], ...]:
    return shown_fields(
        (
            (_("Receipt number"), view.receipt_number),
            (_("Invoice number"), view.number),
            (_("Paid on"), view.paid_at),
            (_("Payment method"), view.payment_method),
            *((found.label, found.value) for found in view.custom_fields),
            (_("Your tax ID"), view.customer_tax_ids),
            (_("Seller's tax ID"), view.merchant_tax_ids),
        )
    )


def _items(view: ReceiptView, presented: PresentedReceipt) -> tuple[Row, ...]:
    _ = presented.translations.gettext
    credit = _("%(amount)s (credit)")
    rows = [
        Row(
            label=f"{line.quantity} {TIMES} {line.description}"
            if line.quantity
            else line.description,
            amount=credit % {"amount": line.amount} if line.is_credit else line.amount,
            note=line.period,
        )
        for line in view.lines
    ]
    if view.more_lines:
        more = presented.translations.ngettext(
            "and %(num)s more item on the invoice",
            "and %(num)s more items on the invoice",
            view.more_lines,
        )
        rows.append(Row(label=more % {"num": view.more_lines_shown}))
    elif view.lines_truncated:
        rows.append(Row(label=_("and more items on the invoice")))
    elif not view.lines:
        rows.append(Row(label=_("See the invoice for the items.")))
    return tuple(rows)


def _totals(view: ReceiptView, _: Gettext) -> tuple[Row, ...]:
    rows = [Row(label=_("Subtotal"), amount=view.subtotal)] if view.subtotal else []
    rows += [Row(label=found.label, amount=found.amount) for found in view.discounts]
    if view.shipping:
        rows.append(Row(label=_("Shipping"), amount=view.shipping))
    rows += [Row(label=tax.label, amount=tax.amount) for tax in view.taxes]
    paid_label = _("Amount paid")
    if view.adjusted:
        rows.append(Row(label=_("Total"), amount=view.total))
        adjustments = (
            (_("Credit notes"), view.credit_notes),
            (_("Previous balance"), view.previous_balance),
            (_("From your credit balance"), view.credit_applied and view.credit_applied_negative),
            (_("Added to your credit balance"), view.credit_added),
            (_("Carried to your next invoice"), view.carried_forward),
            (view.payment_method or "", view.paid_off_stripe),
        )
        rows += [Row(label=label, amount=amount) for label, amount in adjustments if amount]
        if view.credit_applied or view.paid_off_stripe:
            paid_label = _("Amount charged")
    rows.append(Row(label=paid_label, amount=view.amount_paid, strong=True))
    rows += [Row(label=tax.label, amount=tax.amount) for tax in view.included_taxes]
    return tuple(rows)
