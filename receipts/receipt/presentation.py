"""A receipt's facts as the text a reader sees, in one locale and time zone.

Templates get only finished strings: every amount formatted in the invoice's
currency with the decimals chosen once for the whole receipt, dates and times
in the merchant's time zone (``RECEIPTS_TIMEZONE``), labels translated. The
amounts come from :func:`receipts.receipt.statement.statement`, which refuses
a receipt whose rows would not add up. The README lists each field with an
example value.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from gettext import NullTranslations
from zoneinfo import ZoneInfo

from babel import Locale
from babel.numbers import NumberPattern, format_decimal

from receipts.receipt.api_facts import PaymentMethod, TaxId
from receipts.receipt.dates import format_moment, format_period
from receipts.receipt.invoice_details import InvoiceDetails
from receipts.receipt.invoice_facts import LineItem, ReceiptFacts
from receipts.receipt.invoice_totals import Discount, Tax
from receipts.receipt.money import format_amount, receipt_digits
from receipts.receipt.payment_methods import describe_payment_method
from receipts.receipt.statement import Statement, statement

TIMES = "\u00d7"
Gettext = Callable[[str], str]
Money = Callable[[int], str]


@dataclass(frozen=True, kw_only=True)
class LineView:
    description: str
    quantity: str | None  # "2", shown when more than one
    period: str | None  # "Nov 30 - Dec 30, 2025", with the locale's dash
    amount: str  # "$98.00"; "-$9.67" for a credit
    is_credit: bool
    proration: bool


@dataclass(frozen=True, kw_only=True)
class AmountView:
    label: str  # "Launch offer (20% off)", "Sales tax (8.875%)"
    amount: str


@dataclass(frozen=True, kw_only=True)
class FieldView:
    label: str  # "PO number"
    value: str


@dataclass(frozen=True, kw_only=True)
class ReceiptView:
    """What the templates see as ``receipt``."""

    merchant: str | None
    number: str
    receipt_number: str | None  # Stripe's receipt number for the charge, when it has one
    invoice_id: str
    customer_name: str | None
    customer_email: str
    customer_address: tuple[str, ...]
    customer_tax_ids: str | None  # "VAT DE123456789"
    merchant_tax_ids: str | None  # "VAT FR40123456824"; "shown on the invoice" when unknown
    custom_fields: tuple[FieldView, ...]
    memo: str | None  # the invoice's description
    footer: str | None  # the invoice's footer
    currency: str
    lines: tuple[LineView, ...]
    more_lines: int | None
    more_lines_shown: str | None  # the same count as the locale writes it: "1.000.000"
    lines_truncated: bool
    lines_missing: bool  # the payload lists no lines at all: see the invoice
    subtotal: str | None  # None when nothing stands between it and the total
    discounts: tuple[AmountView, ...]
    taxes: tuple[AmountView, ...]  # added on top
    included_taxes: tuple[AmountView, ...]  # already part of the prices
    shipping: str | None
    total: str
    adjusted: bool  # something stands between the total and the amount paid
    credit_notes: str | None
    credit_applied: str | None  # "$4.00", taken from the customer's credit balance
    credit_applied_negative: str | None  # "-$4.00", the same as a deduction
    previous_balance: str | None
    credit_added: str | None
    carried_forward: str | None  # "-$0.30", left for the next invoice
    paid_off_stripe: str | None  # "-$108.00", marked as paid outside Stripe
    amount_paid: str
    settled: str  # the amount this receipt is for: paid, from credit, marked paid
    # "payment", "credit", "credit_and_payment", "out_of_band" or "nothing_due"
    settlement: str
    paid_at: str | None
    payment_method: str | None
    hosted_invoice_url: str
    invoice_pdf: str | None
    support_email: str | None
    support_url: str | None


@dataclass(frozen=True, kw_only=True)
class Contact:
    """Who the receipt is from, as the settings say it when the invoice does not."""

    merchant: str | None = None
    support_email: str | None = None
    support_url: str | None = None


def present(
    facts: ReceiptFacts,
    *,
    locale: Locale,
    translations: NullTranslations,
    timezone: ZoneInfo,
    payment_method: PaymentMethod | None = None,
    receipt_number: str | None = None,
    contact: Contact = Contact(),
) -> ReceiptView:
    """The view of ``facts``; raises ReceiptDoesNotAddUp when its rows would not add up."""
    _ = translations.gettext
    rows = statement(facts)
    money = _money(facts, rows, str(locale))

    def optional(amount: int) -> str | None:
        return money(amount) if amount else None

    merchant = facts.merchant or contact.merchant
    kind = _settlement(facts, rows)
    return ReceiptView(
        merchant=merchant,
        number=facts.number,
        receipt_number=receipt_number or facts.payment.receipt_number or facts.receipt_number,
        invoice_id=facts.invoice_id,
        customer_name=facts.customer_name,
        customer_email=facts.to,
        customer_address=address_lines(facts.customer_address, facts.customer_country, locale),
        customer_tax_ids=tax_ids_shown(facts.details.customer_tax_ids, _),
        merchant_tax_ids=merchant_tax_ids_shown(facts.details, _),
        custom_fields=tuple(FieldView(label=n, value=v) for n, v in facts.details.custom_fields),
        memo=facts.details.memo,
        footer=facts.details.footer,
        currency=facts.currency.upper(),
        lines=tuple(_line(line, money, locale, timezone, _) for line in facts.lines),
        more_lines=facts.more_lines,
        more_lines_shown=None if facts.more_lines is None else _count(facts.more_lines, locale),
        lines_truncated=facts.lines_truncated,
        lines_missing=not facts.lines_listed,
        subtotal=_subtotal_shown(rows, money),
        discounts=tuple(_discount(found, money, locale, _) for found in rows.discounts),
        taxes=tuple(_tax(found, money, locale, _) for found in rows.added_taxes),
        included_taxes=tuple(_tax(found, money, locale, _) for found in rows.included_taxes),
        shipping=optional(rows.shipping),
        total=money(rows.total),
        adjusted=rows.adjusted,
        credit_notes=optional(-rows.credit_notes),
        credit_applied=optional(rows.credit_applied),
        credit_applied_negative=optional(-rows.credit_applied),
        previous_balance=optional(rows.previous_balance),
        credit_added=optional(rows.credit_added),
        carried_forward=optional(-rows.carried_forward),
        paid_off_stripe=optional(-rows.paid_off_stripe),
        amount_paid=money(rows.amount_paid),
        settled=money(rows.settled),
        settlement=kind,
        paid_at=None if facts.paid_at is None else format_moment(facts.paid_at, timezone, locale),
        payment_method=_how_paid(kind, merchant, payment_method or facts.payment.method, _),
        hosted_invoice_url=facts.hosted_invoice_url,
        invoice_pdf=facts.invoice_pdf,
        support_email=contact.support_email,
        support_url=contact.support_url,
    )


def _money(facts: ReceiptFacts, rows: Statement, locale: str) -> Money:
    amounts = [*(line.amount for line in facts.lines), *rows.amounts()]
    digits = receipt_digits(facts.currency, amounts)

    def money(amount: int) -> str:
        return format_amount(amount, facts.currency, locale, digits=digits)

    return money


def _subtotal_shown(rows: Statement, money: Money) -> str | None:
    if rows.subtotal is None or not (rows.discounts or rows.shipping or rows.added_taxes):
        return None
    return money(rows.subtotal)


def _settlement(facts: ReceiptFacts, rows: Statement) -> str:
    if rows.paid_off_stripe:
        return "out_of_band"
    if rows.total <= 0 and not rows.settled:
        return "nothing_due"  # a trial, a 100 % coupon (sent with RECEIPTS_SEND_ZERO_VALUE)
    if rows.credit_applied and rows.amount_paid:
        return "credit_and_payment"
    if rows.credit_applied:
        return "credit"
    return "payment"


def _how_paid(
    kind: str, merchant: str | None, method: PaymentMethod | None, _: Gettext
) -> str | None:
    if kind == "out_of_band":
        if merchant:
            return _("Marked as paid by %(merchant)s") % {"merchant": merchant}
        return _("Marked as paid")
    if kind == "credit":
        return _("Credit balance")
    return describe_payment_method(method, _)


def _line(line: LineItem, money: Money, locale: Locale, timezone: ZoneInfo, _: Gettext) -> LineView:
    description = line.description or _("Item")
    quantity = None if line.quantity is None else _quantity(line.quantity, locale)
    # Stripe writes the quantity into subscription lines ("2 x Pro (at $49.00 /
    # month)", "Remaining time on 2 x Pro after 15 Nov 2025"), with a times sign.
    if quantity and f"{line.quantity} {TIMES}" in description:
        quantity = None
    return LineView(
        description=description,
        quantity=quantity,
        period=None if line.period is None else format_period(*line.period, timezone, locale),
        amount=money(line.amount),
        is_credit=line.amount < 0,
        proration=line.proration,
    )


def _count(value: int, locale: Locale) -> str:
    return str(format_decimal(value, locale=locale))


def _quantity(value: Decimal, locale: Locale) -> str:
    # Below a thousand a whole number is written the same in every locale.
    if value < 1000 and value == value.to_integral_value():
        return str(int(value))
    return str(format_decimal(value, locale=locale))


def _discount(found: Discount, money: Money, locale: Locale, _: Gettext) -> AmountView:
    name = found.name or _("Discount")
    if found.credit:
        label = _("Credits applied")
    elif found.percent_off is not None and not _says_percentage(name, found.percent_off, locale):
        label = _("%(name)s (%(percent)s off)") % {
            "name": name,
            "percent": format_percentage(found.percent_off, locale),
        }
    else:
        label = name
    return AmountView(label=label, amount=money(-found.amount))


def _says_percentage(name: str, percent: Decimal, locale: Locale) -> bool:
    """ "10% Off" already says 10 %: the label does not repeat it."""
    number = format(percent.normalize(), "f")
    written = rf"(?<![\d.,]){re.escape(number)}[\s\u00a0\u202f]?%"
    return bool(re.search(written, name)) or format_percentage(percent, locale) in name


def _tax(found: Tax, money: Money, locale: Locale, _: Gettext) -> AmountView:
    name = found.name or _("Tax")
    rate = None if found.percentage is None else format_percentage(found.percentage, locale)
    if found.reverse_charge:
        label = _("%(name)s (reverse charge)") % {"name": name}
    elif found.inclusive:
        label = (
            _("%(name)s (%(rate)s incl.)") % {"name": name, "rate": rate}
            if rate
            else _("%(name)s (incl.)") % {"name": name}
        )
    else:
        label = _("%(name)s (%(rate)s)") % {"name": name, "rate": rate} if rate else name
    return AmountView(label=label, amount=money(found.amount))


# Tax id types whose usual abbreviation is the same in every language; every
# ``*_vat`` type reads "VAT" in the reader's language.
WORD_JOINER = "\u2060"
TAX_ID_NAMES = {
    "au_abn": "ABN",
    "ca_bn": "BN",
    "ca_gst_hst": "GST/HST",
    "in_gst": "GSTIN",
    "nz_gst": "GST",
    "sg_gst": "GST",
    "us_ein": "EIN",
}


def merchant_tax_ids_shown(details: InvoiceDetails, _: Gettext) -> str | None:
    """The seller's tax ids; "shown on the invoice" when the invoice names ids nobody told us."""
    shown = tax_ids_shown(details.merchant_tax_ids, _)
    return shown or (_("shown on the invoice") if details.merchant_tax_ids_unknown else None)


def tax_ids_shown(tax_ids: tuple[TaxId, ...], _: Gettext) -> str | None:
    """ "VAT DE123456789, EIN 12-3456789": each id after its kind, where it has a usual name."""
    shown = []
    for found in tax_ids:
        kind = found.kind or ""
        name = _("VAT") if kind.endswith("_vat") else TAX_ID_NAMES.get(kind)
        if name:
            # On a phone the line may break between the name and the number, never
            # inside "USt-IdNr.": a word joiner (dropped from the text part) after
            # its hyphen keeps it whole.
            name = name.replace("-", "-" + WORD_JOINER)
        shown.append(f"{name} {found.value}" if name else found.value)
    return ", ".join(shown) or None


def address_lines(
    address: tuple[str, ...], country_code: str | None, locale: Locale
) -> tuple[str, ...]:
    """The billing address's lines, then its country named in the reader's language."""
    country = locale.territories.get(country_code) if country_code else None
    return (*address, country) if country else address


@lru_cache(maxsize=256)
def format_percentage(value: Decimal, locale: Locale) -> str:
    """ "8.875%", "19 %": the locale's percent format with up to three decimals."""
    return str(_percent_pattern(locale).apply(value / 100, locale))


@lru_cache(maxsize=32)
def _percent_pattern(locale: Locale) -> NumberPattern:
    pattern: NumberPattern = copy.copy(locale.percent_formats[None])
    pattern.frac_prec = (0, 3)
    return pattern


def tax_view(found: Tax, money: Money, locale: Locale, _: Gettext) -> AmountView:
    """A tax row as a receipt labels it ("VAT (19% incl.)"); refunds and credit notes too."""
    return _tax(found, money, locale, _)


def written_quantity(value: Decimal, locale: Locale) -> str:
    """A quantity as the locale writes it ("2", "1.5", "1,000")."""
    return _quantity(value, locale)
