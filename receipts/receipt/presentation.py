"""A receipt's facts as the text a reader sees, in one locale and time zone.

Templates get only finished strings: every amount formatted in the invoice's
currency, dates and times in the merchant's time zone (``RECEIPTS_TIMEZONE``),
labels translated. The README lists each field with an example value.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from functools import lru_cache
from gettext import NullTranslations
from zoneinfo import ZoneInfo

from babel import Locale
from babel.dates import format_date, format_interval, format_time, get_datetime_format
from babel.numbers import NumberPattern, format_decimal

from receipts.receipt.api_facts import PaymentMethod
from receipts.receipt.invoice_facts import LineItem, ReceiptFacts
from receipts.receipt.invoice_totals import Discount, Tax
from receipts.receipt.money import format_amount
from receipts.receipt.untrusted import one_line

TIMES = "\u00d7"
Gettext = Callable[[str], str]
Money = Callable[[int], str]


def N_(message: str) -> str:
    """Mark a message for the catalogs; it is translated where it is shown."""
    return message


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
class ReceiptView:
    """What the templates see as ``receipt``."""

    merchant: str | None
    number: str
    invoice_id: str
    customer_name: str | None
    customer_email: str
    customer_address: tuple[str, ...]
    currency: str
    lines: tuple[LineView, ...]
    more_lines: int | None
    lines_truncated: bool
    subtotal: str | None
    discounts: tuple[AmountView, ...]
    taxes: tuple[AmountView, ...]
    shipping: str | None
    total: str | None
    credit_notes: str | None
    credit_applied: str | None  # "$4.00", taken from the customer's credit balance
    credit_applied_negative: str | None  # "-$4.00", the same as a deduction
    previous_balance: str | None
    amount_paid: str
    paid_at: str | None
    payment_method: str | None
    hosted_invoice_url: str
    invoice_pdf: str | None


def present(
    facts: ReceiptFacts,
    *,
    locale: Locale,
    translations: NullTranslations,
    timezone: ZoneInfo,
    payment_method: PaymentMethod | None = None,
) -> ReceiptView:
    _ = translations.gettext
    name = str(locale)

    def money(amount: int) -> str:
        return format_amount(amount, facts.currency, name)

    def optional(amount: int | None) -> str | None:
        return money(amount) if amount else None

    return ReceiptView(
        merchant=facts.merchant,
        number=facts.number,
        invoice_id=facts.invoice_id,
        customer_name=facts.customer_name,
        customer_email=facts.to,
        customer_address=_address(facts, locale),
        currency=facts.currency.upper(),
        lines=tuple(_line(line, money, locale, timezone, _) for line in facts.lines),
        more_lines=facts.more_lines,
        lines_truncated=facts.lines_truncated,
        subtotal=None if facts.subtotal is None else money(facts.subtotal),
        discounts=tuple(_discount(found, money, locale, _) for found in facts.discounts),
        taxes=tuple(_tax(found, money, locale, _) for found in facts.taxes),
        shipping=optional(facts.shipping),
        total=None if facts.total is None else money(facts.total),
        credit_notes=optional(-facts.credit_notes),
        credit_applied=optional(facts.credit_applied),
        credit_applied_negative=optional(-facts.credit_applied),
        previous_balance=optional(facts.previous_balance),
        amount_paid=money(facts.amount_paid),
        paid_at=None if facts.paid_at is None else format_moment(facts.paid_at, timezone, locale),
        payment_method=describe_payment_method(payment_method, _),
        hosted_invoice_url=facts.hosted_invoice_url,
        invoice_pdf=facts.invoice_pdf,
    )


def format_moment(timestamp: int, timezone: ZoneInfo, locale: Locale) -> str:
    """ "November 30, 2025, 12:00 AM UTC": the long date and short time in ``timezone``."""
    moment = datetime.fromtimestamp(timestamp, tz=timezone)
    return _moment(moment.date(), moment.hour, moment.minute, moment.tzname() or "", locale)


@lru_cache(maxsize=256)
def _moment(day: date, hour: int, minute: int, zone: str, locale: Locale) -> str:
    # Cached by the minute: receipts arriving together share it.
    when = str(get_datetime_format("medium", locale=locale)).replace("'", "")
    clock = format_time(time(hour, minute), "short", locale=locale)
    shown = format_date(day, "long", locale=locale)
    return when.replace("{1}", shown).replace("{0}", f"{clock} {zone}")


_BRANDS = {
    "amex": "American Express",
    "cartes_bancaires": "Cartes Bancaires",
    "diners": "Diners Club",
    "discover": "Discover",
    "eftpos_au": "eftpos",
    "interac": "Interac",
    "jcb": "JCB",
    "link": "Link",
    "mastercard": "Mastercard",
    "unionpay": "UnionPay",
    "visa": "Visa",
}
_KINDS = {
    "acss_debit": N_("Pre-authorized debit"),
    "au_becs_debit": N_("BECS Direct Debit"),
    "bacs_debit": N_("Bacs Direct Debit"),
    "customer_balance": N_("Bank transfer"),
    "sepa_debit": N_("SEPA Direct Debit"),
    "us_bank_account": N_("Bank account"),
}
_NAMED_KINDS = {"link": "Link", "paypal": "PayPal", "cashapp": "Cash App Pay"}


def describe_payment_method(method: PaymentMethod | None, _: Gettext) -> str | None:
    """ "Visa ending 4242", "SEPA Direct Debit ending 3000"; None when unknown."""
    if method is None:
        return None
    brand = one_line(method.brand, 40)
    if method.kind == "card":
        name = _BRANDS.get(brand or "") or (brand.title() if brand else _("Card"))
    elif method.kind in _KINDS:
        name = brand if method.kind == "us_bank_account" and brand else _(_KINDS[method.kind])
    else:
        name = _NAMED_KINDS.get(method.kind, "")
    last4 = method.last4 if method.last4 and method.last4.isascii() else None
    if not name:
        return None
    if last4 and last4.isdigit() and len(last4) == 4:
        return _("%(method)s ending %(last4)s") % {"method": name, "last4": last4}
    return name


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
        period=None if line.period is None else _period(*line.period, timezone, locale),
        amount=money(line.amount),
        is_credit=line.amount < 0,
        proration=line.proration,
    )


def _quantity(value: Decimal, locale: Locale) -> str:
    # Below a thousand a whole number is written the same in every locale.
    if value < 1000 and value == value.to_integral_value():
        return str(int(value))
    return str(format_decimal(value, locale=locale))


def _discount(found: Discount, money: Money, locale: Locale, _: Gettext) -> AmountView:
    if found.credit:
        label = _("Credits applied")
    elif found.percent_off is not None:
        label = _("%(name)s (%(percent)s off)") % {
            "name": found.name or _("Discount"),
            "percent": format_percentage(found.percent_off, locale),
        }
    else:
        label = found.name or _("Discount")
    return AmountView(label=label, amount=money(-found.amount))


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


def _address(facts: ReceiptFacts, locale: Locale) -> tuple[str, ...]:
    country = locale.territories.get(facts.customer_country) if facts.customer_country else None
    return (*facts.customer_address, country) if country else facts.customer_address


def format_percentage(value: Decimal, locale: Locale) -> str:
    """ "8.875%", "19 %": the locale's percent format with up to three decimals."""
    return str(_percent_pattern(locale).apply(value / 100, locale))


@lru_cache(maxsize=32)
def _percent_pattern(locale: Locale) -> NumberPattern:
    pattern: NumberPattern = copy.copy(locale.percent_formats[None])
    pattern.frac_prec = (0, 3)
    return pattern


@lru_cache(maxsize=1024)
def _period_dates(start: date, end: date, locale: Locale) -> str:
    return str(format_interval(start, end, "yMMMd", locale=locale))


def _period(start: int, end: int, timezone: ZoneInfo, locale: Locale) -> str:
    first = datetime.fromtimestamp(start, tz=timezone).date()
    last = datetime.fromtimestamp(end, tz=timezone).date()
    return _period_dates(first, last, locale)
