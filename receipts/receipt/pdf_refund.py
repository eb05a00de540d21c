"""The refund receipt as a PDF, attached to its email when ``RECEIPTS_ATTACH_PDF`` is true.

It says what the refund email says, from the same view its templates get
(:class:`~receipts.receipt.after_payment_views.RefundView`), in the same
language and with the same messages: who refunded and how much, of which
amount paid for which invoice, to which payment method, when, and when to
expect the money; the invoice's number and payment, both tax ids, who was
billed; the refund as the receipt lists an item (with its reason) and its
amount as the total; and where to ask. It is drawn like the receipt's PDF
(:mod:`receipts.receipt.pdf_layout`), dated by the refund, and attached as
``refund-<invoice number>.pdf``: the invoice's receipt is
``receipt-<invoice number>.pdf``, so the two never share a name in the
folder an accountant files them in. A credit note has no PDF of ours: its
email links Stripe's own.
"""

from __future__ import annotations

from receipts.receipt.after_payment import RefundFacts
from receipts.receipt.after_payment_views import RefundView
from receipts.receipt.api_facts import PaymentMethod
from receipts.receipt.payment_methods import N_
from receipts.receipt.pdf import (
    Gettext,
    SupportMessages,
    addressee,
    document_of,
    shown_fields,
    support_note,
)
from receipts.receipt.pdf_layout import Document, Row, draw
from receipts.receipt.rendering import PresentedRefund, Renderer

REFUND_SUPPORT = SupportMessages(
    both=N_("Questions about this refund? Write to %(email)s or visit %(url)s."),
    email=N_("Questions about this refund? Write to %(email)s."),
    url=N_("Questions about this refund? Visit %(url)s."),
)


def refund_pdf(
    renderer: Renderer,
    facts: RefundFacts,
    *,
    locale: str | None = None,
    payment_method: PaymentMethod | None = None,
    sender: str | None = None,
) -> bytes:
    """The PDF of the refund receipt of ``facts``: the same bytes for the same input."""
    presented = renderer.present_refund(
        facts, locale=locale, payment_method=payment_method, sender=sender
    )
    return draw(refund_document(presented, dated=facts.refunded_at or facts.invoice.paid_at))


def refund_document(presented: PresentedRefund, *, dated: int | None = None) -> Document:
    """The refund receipt as a document of finished strings, in the email's language."""
    refund = presented.view
    _ = presented.translations.gettext
    support = support_note(refund.support_email, refund.support_url, REFUND_SUPPORT, _)
    return document_of(
        presented,
        title=_title(refund, _),
        merchant=refund.merchant,
        lead="\n".join((_what(refund, _), _where(refund, _), _when(refund, _))),
        fields=_fields(refund, _),
        addressee_label=_("Billed to"),
        addressee=addressee(refund.customer_name, refund.customer_address, refund.customer_email),
        items=(_refunded(refund, _),),
        totals=(Row(label=_("Amount refunded"), amount=refund.amount, strong=True),),
        notes=(support,) if support else (),
        dated=dated,
    )


def _title(refund: RefundView, _: Gettext) -> str:
    """The email's subject: "Refund from Acme Tools, Inc. for invoice ACME-0042"."""
    number = refund.invoice.number
    if refund.merchant:
        message = _("Refund from %(merchant)s for invoice %(number)s")
        return str(message % {"merchant": refund.merchant, "number": number})
    return str(_("Refund for invoice %(number)s") % {"number": number})


def _what(refund: RefundView, _: Gettext) -> str:
    """Who refunded how much, of what was paid for which invoice."""
    if refund.partial and refund.invoice.amount_paid:
        message = (
            _(
                "%(merchant)s has issued a partial refund of %(amount)s of the %(paid)s you "
                "paid for invoice %(number)s."
            )
            if refund.merchant
            else _(
                "You have received a partial refund of %(amount)s of the %(paid)s you paid "
                "for invoice %(number)s."
            )
        )
    elif refund.merchant:
        message = _("%(merchant)s has refunded %(amount)s for invoice %(number)s.")
    else:
        message = _("You have been refunded %(amount)s for invoice %(number)s.")
    values = {
        "merchant": refund.merchant,
        "amount": refund.amount,
        "paid": refund.invoice.amount_paid,
        "number": refund.invoice.number,
    }
    return str(message % values)


def _where(refund: RefundView, _: Gettext) -> str:
    if refund.payment_method:
        message = _("The money goes back to the payment method you paid with: %(method)s.")
        return str(message % {"method": refund.payment_method})
    return _("The money goes back to the payment method you paid with.")


def _when(refund: RefundView, _: Gettext) -> str:
    """When to expect the money: Stripe's documented timing for cards, else the bank's."""
    if refund.to_card:
        return _(
            "Refunds to a card usually appear on your statement within 5 to 10 business "
            "days. If the original payment disappears from your statement instead, that is "
            "the refund."
        )
    if refund.payment_method:
        return _(
            "How soon the money reaches your account depends on your bank; it usually takes "
            "a few business days."
        )
    return _("How soon you see the money depends on your bank or card issuer.")


def _refunded(refund: RefundView, _: Gettext) -> Row:
    """What was refunded, as the receipt lists an item: the invoice, the amount, why."""
    label = _("Refund for invoice %(number)s") % {"number": refund.invoice.number}
    return Row(label=str(label), amount=refund.amount, note=refund.reason)


def _fields(refund: RefundView, _: Gettext) -> tuple[tuple[str, str], ...]:
    invoice = refund.invoice
    return shown_fields(
        (
            (_("Refunded on"), refund.refunded_at),
            (_("Refunded to"), refund.payment_method),
            (_("Invoice number"), invoice.number),
            (_("Paid on"), invoice.paid_at),
            (_("Amount paid"), invoice.amount_paid),
            (_("Your tax ID"), refund.customer_tax_ids),
            (_("Seller's tax ID"), refund.merchant_tax_ids),
        )
    )
