"""A refund or a credit note as the text its email shows, in one locale and time zone.

As for the receipt (:mod:`receipts.receipt.presentation`), templates get only
finished strings: amounts in the refund's or credit note's currency with the
decimals chosen once for the whole email, dates in ``RECEIPTS_TIMEZONE``,
labels and reasons translated. The README lists each field with an example.

When to expect the money: Stripe submits a refund at once; a card refund
takes 5 to 10 business days to show on the customer's statement, or the
original payment disappears from it instead (a reversal)
(https://support.stripe.com/questions/how-long-refunds-take-to-process).
For other payment methods the templates say that it depends on the bank.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from gettext import NullTranslations
from zoneinfo import ZoneInfo

from babel import Locale

from receipts.receipt.after_payment import (
    CreditLine,
    CreditNoteFacts,
    InvoiceReference,
    RefundFacts,
    invoice_discount,
)
from receipts.receipt.api_facts import PaymentMethod
from receipts.receipt.dates import format_day, format_moment
from receipts.receipt.money import format_amount, receipt_digits
from receipts.receipt.payment_methods import N_, describe_payment_method
from receipts.receipt.presentation import (
    AmountView,
    Contact,
    address_lines,
    merchant_tax_ids_shown,
    tax_ids_shown,
    tax_view,
    written_quantity,
)

Money = Callable[[int], str]

# What a customer is told about why; "fraudulent" is never shown to them.
REASONS = {
    "duplicate": N_("Duplicate payment"),
    "requested_by_customer": N_("Requested by you"),
    "order_change": N_("Order change"),
    "product_unsatisfactory": N_("Product or service not satisfactory"),
}


@dataclass(frozen=True, kw_only=True)
class InvoiceView:
    """The paid invoice a refund or credit note belongs to."""

    number: str
    invoice_id: str
    paid_at: str | None  # "November 30, 2025, 12:00 AM UTC", as the receipt shows it
    amount_paid: str | None  # "$98.00", in the invoice's currency
    hosted_invoice_url: str | None


@dataclass(frozen=True, kw_only=True)
class RefundView:
    """What the refund templates see as ``refund``."""

    merchant: str | None
    customer_name: str | None
    customer_email: str
    customer_address: tuple[str, ...]  # the invoice's billing address, its country named
    customer_tax_ids: str | None  # "VAT DE123456789", as the receipt shows them
    merchant_tax_ids: str | None  # "VAT FR40123456824"; "shown on the invoice" when unknown
    refund_id: str
    amount: str  # "$49.00"
    currency: str  # "USD"
    partial: bool  # less than the invoice's amount paid
    refunded_at: str | None  # "December 3, 2025"
    payment_method: str | None  # "Visa ending in 4242"; None when unknown
    to_card: bool  # 5 to 10 business days (Stripe's documented card timing)
    reason: str | None  # "Requested by you"; None when Stripe gives none, or "fraudulent"
    invoice: InvoiceView
    support_email: str | None
    support_url: str | None


@dataclass(frozen=True, kw_only=True)
class CreditLineView:
    description: str  # "Item" when the line has none
    quantity: str | None  # "2", shown when not 1
    amount: str


@dataclass(frozen=True, kw_only=True)
class CreditNoteView:
    """What the credit note templates see as ``credit_note``."""

    merchant: str | None
    customer_name: str | None
    customer_email: str
    credit_note_id: str
    number: str  # "ACME-0043-CN-01"
    issued_at: str | None
    currency: str
    lines: tuple[CreditLineView, ...]
    more_lines: bool  # not every line is listed: the PDF has them all
    subtotal: str | None  # None when nothing stands between the lines and the total
    discount: str | None  # "-$5.00"
    taxes: tuple[AmountView, ...]  # added on top
    included_taxes: tuple[AmountView, ...]  # part of the amounts
    shipping: str | None
    total: str
    refunded: str | None  # back to the payment method
    credited: str | None  # to the customer's credit balance
    out_of_band: str | None  # settled outside Stripe
    off_invoice: str | None  # taken off what the invoice still owed
    payment_method: str | None  # where ``refunded`` goes, when known
    to_card: bool
    reason: str | None
    memo: str | None  # typed by the merchant; one line
    pdf: str | None  # the credit note's PDF on Stripe
    invoice: InvoiceView
    support_email: str | None
    support_url: str | None


def present_refund(
    facts: RefundFacts,
    *,
    locale: Locale,
    translations: NullTranslations,
    timezone: ZoneInfo,
    payment_method: PaymentMethod | None,
    contact: Contact,
) -> RefundView:
    _ = translations.gettext
    invoice = facts.invoice
    same = invoice.currency == facts.currency
    paid = invoice.amount_paid if same and invoice.amount_paid is not None else None
    money = _money(facts.currency, [facts.amount, *([paid] if paid is not None else [])], locale)
    method = payment_method or facts.method
    return RefundView(
        merchant=invoice.merchant or contact.merchant,
        customer_name=invoice.customer_name,
        customer_email=invoice.to,
        customer_address=address_lines(invoice.customer_address, invoice.customer_country, locale),
        customer_tax_ids=tax_ids_shown(invoice.details.customer_tax_ids, _),
        merchant_tax_ids=merchant_tax_ids_shown(invoice.details, _),
        refund_id=facts.refund_id,
        amount=money(facts.amount),
        currency=facts.currency.upper(),
        partial=facts.partial,
        refunded_at=_day(facts.refunded_at, timezone, locale),
        payment_method=describe_payment_method(method, _),
        to_card=method is not None and method.kind == "card",
        reason=_(REASONS[facts.reason]) if facts.reason else None,
        invoice=_invoice(invoice, money if same else None, locale, timezone),
        support_email=contact.support_email,
        support_url=contact.support_url,
    )


def present_credit_note(
    facts: CreditNoteFacts,
    *,
    locale: Locale,
    translations: NullTranslations,
    timezone: ZoneInfo,
    payment_method: PaymentMethod | None,
    contact: Contact,
) -> CreditNoteView:
    _ = translations.gettext
    money = _money(facts.currency, _credit_amounts(facts), locale)
    settled = facts.settlement
    invoice = facts.invoice
    same = invoice.currency == facts.currency
    discount = facts.discount if facts.lines_sum is not None else invoice_discount(facts)
    stands_between = bool(discount or facts.shipping or _added(facts))
    return CreditNoteView(
        merchant=invoice.merchant or contact.merchant,
        customer_name=invoice.customer_name,
        customer_email=invoice.to,
        credit_note_id=facts.credit_note_id,
        number=facts.number,
        issued_at=_day(facts.issued_at, timezone, locale),
        currency=facts.currency.upper(),
        lines=tuple(_credit_line(line, money, locale, _) for line in facts.lines),
        more_lines=facts.more_lines,
        subtotal=_credit_subtotal(facts, money) if stands_between else None,
        discount=money(-discount) if discount else None,
        taxes=tuple(tax_view(t, money, locale, _) for t in facts.taxes if not t.inclusive),
        included_taxes=tuple(tax_view(t, money, locale, _) for t in facts.taxes if t.inclusive),
        shipping=money(facts.shipping) if facts.shipping else None,
        total=money(facts.total),
        refunded=money(settled.refunded) if settled.refunded else None,
        credited=money(settled.credited) if settled.credited else None,
        out_of_band=money(settled.out_of_band) if settled.out_of_band else None,
        off_invoice=money(settled.invoice) if settled.invoice else None,
        payment_method=describe_payment_method(payment_method, _),
        to_card=payment_method is not None and payment_method.kind == "card",
        reason=_(REASONS[facts.reason]) if facts.reason else None,
        memo=facts.memo,
        pdf=facts.pdf,
        invoice=_invoice(invoice, money if same else None, locale, timezone),
        support_email=contact.support_email,
        support_url=contact.support_url,
    )


def _money(currency: str, amounts: list[int], locale: Locale) -> Money:
    digits = receipt_digits(currency, amounts)

    def money(amount: int) -> str:
        return format_amount(amount, currency, locale, digits=digits)

    return money


def _credit_amounts(facts: CreditNoteFacts) -> list[int]:
    settled = facts.settlement
    return [
        *(line.amount for line in facts.lines),
        *(tax.amount for tax in facts.taxes),
        facts.discount, facts.shipping, facts.total, facts.subtotal or 0, facts.lines_sum or 0,
        settled.refunded, settled.credited, settled.out_of_band, settled.invoice,
        facts.invoice.amount_paid or 0,
    ]  # fmt: skip


def _added(facts: CreditNoteFacts) -> int:
    return sum(tax.amount for tax in facts.taxes if not tax.inclusive)


def _credit_subtotal(facts: CreditNoteFacts, money: Money) -> str | None:
    """The lines' sum (every discount shown after it), else Stripe's subtotal."""
    subtotal = facts.lines_sum if facts.lines_sum is not None else facts.subtotal
    return None if subtotal is None else money(subtotal)


def _credit_line(
    line: CreditLine, money: Money, locale: Locale, _: Callable[[str], str]
) -> CreditLineView:
    return CreditLineView(
        description=line.description or _("Item"),
        quantity=None if line.quantity is None else written_quantity(line.quantity, locale),
        amount=money(line.amount),
    )


def _day(timestamp: int | None, timezone: ZoneInfo, locale: Locale) -> str | None:
    return None if timestamp is None else format_day(timestamp, timezone, locale)


def _invoice(
    invoice: InvoiceReference, money: Money | None, locale: Locale, timezone: ZoneInfo
) -> InvoiceView:
    """``money`` formats in the invoice's currency; None when it is not the refund's."""
    paid = invoice.amount_paid
    return InvoiceView(
        number=invoice.number,
        invoice_id=invoice.invoice_id,
        paid_at=None
        if invoice.paid_at is None
        else format_moment(invoice.paid_at, timezone, locale, zone_with_time=True),
        amount_paid=None if paid is None or money is None else money(paid),
        hosted_invoice_url=invoice.hosted_invoice_url,
    )
