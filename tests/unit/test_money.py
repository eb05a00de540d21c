"""Amounts in Stripe's minor units shown right in every currency, and never an exception."""

from __future__ import annotations

import copy
from decimal import Decimal

import pytest
from babel import Locale
from babel.core import get_global
from babel.numbers import get_currency_precision, get_currency_symbol

from receipts.receipt.money import (
    MAX_AMOUNT,
    format_amount,
    is_amount,
    minor_unit_exponent,
    receipt_digits,
)

# The receipt's languages, and locales with other separators, groupings and scripts.
LOCALES = [
    "en_US",
    "de_DE",
    "fr_FR",
    "es_ES",
    "pt_BR",
    "ja_JP",
    "en_IN",
    "fr_CA",
    "it_IT",
    "nl_NL",
    "ar_EG",
]


@pytest.mark.parametrize(
    ("amount", "currency", "locale", "shown"),
    [
        (1999, "usd", "en_US", "$19.99"),
        (-967, "usd", "en_US", "-$9.67"),
        (4900, "eur", "de_DE", "49,00\xa0€"),
        (1500, "jpy", "en_US", "¥1,500"),
        (40400, "jpy", "ja_JP", "￥40,400"),
        (50000, "krw", "en_US", "₩50,000"),
        (123456, "clp", "es", "123.456\xa0CLP"),
        (12345, "bhd", "en_US", "BHD\xa012.345"),
        (1000, "kwd", "en_US", "KWD\xa01.000"),
        (5250, "tnd", "fr_FR", "5,250\xa0TND"),
    ],
)
def test_zero_two_and_three_decimal_currencies(
    amount: int, currency: str, locale: str, shown: str
) -> None:
    """JPY and KRW are sent in whole units, BHD/KWD/TND in thousandths, the rest in hundredths."""
    assert format_amount(amount, currency, locale) == shown


@pytest.mark.parametrize(
    ("amount", "currency", "shown"),
    [
        (1250050, "huf", "HUF\xa012,500.50"),
        (1250000, "huf", "HUF\xa012,500"),
        (50000, "isk", "ISK\xa0500"),
        (50050, "isk", "ISK\xa0500.50"),
        (150000, "all", "ALL\xa01,500"),
    ],
)
def test_stripe_hundredths_of_currencies_shown_without_decimals(
    amount: int, currency: str, shown: str
) -> None:
    """HUF and ISK come in hundredths: whole amounts show none, a fraction shows two decimals."""
    assert format_amount(amount, currency, "en_US") == shown


def test_the_minor_unit_follows_stripe_not_iso() -> None:
    """ISK and HUF have no decimals in ISO 4217 and CLDR but two in Stripe's API."""
    assert [minor_unit_exponent(code) for code in ("isk", "huf", "jpy", "ugx", "kwd")] == [
        2,
        2,
        0,
        0,
        3,
    ]


@pytest.mark.parametrize("value", [True, 1.5, "100", None, MAX_AMOUNT + 1, -MAX_AMOUNT - 1])
def test_values_stripe_cannot_send_are_not_amounts(value: object) -> None:
    """Booleans, floats, strings and absurd integers are refused before formatting."""
    assert not is_amount(value)
    with pytest.raises(ValueError, match="not an amount"):
        format_amount(value, "usd", "en_US")  # type: ignore[arg-type]


def test_every_currency_at_the_bounds_formats_in_every_shipped_locale() -> None:
    """No currency code Babel knows, at the largest amounts allowed, makes formatting raise."""
    currencies = sorted(get_global("currency_fractions"))
    for locale in LOCALES:
        for code in [*currencies, "XYZ"]:
            for amount in (MAX_AMOUNT, -MAX_AMOUNT, 1, 0):
                assert format_amount(amount, code.lower(), locale)


def babel_format(amount: int, code: str, locale: str) -> str:
    """What Babel's own pattern gives for the amount, with the digits format_amount chose,
    and the no-break space ICU's currency spacing puts between letters and digits."""
    exponent, shown = minor_unit_exponent(code), get_currency_precision(code)
    digits = shown if shown >= exponent or amount % 10 ** (exponent - shown) == 0 else exponent
    parsed = Locale.parse(locale)
    pattern = copy.copy(parsed.currency_formats["standard"])
    pattern.frac_prec = (digits, digits)
    major = Decimal(amount).scaleb(-exponent)
    text = str(pattern.apply(major, parsed, currency=code, currency_digits=False))
    symbol = get_currency_symbol(code, parsed)
    if symbol[-1].isalpha() and pattern.prefix[amount < 0].endswith("\u00a4"):
        text = text.replace(symbol, symbol + "\xa0", 1)
    if symbol[0].isalpha() and pattern.suffix[amount < 0].startswith("\u00a4"):
        text = text.replace(symbol, "\xa0" + symbol, 1)
    return text


@pytest.mark.parametrize("locale", LOCALES)
def test_formatting_is_babels_own(locale: str) -> None:
    """Symbols read once per locale and currency give exactly what Babel's pattern gives."""
    amounts = [0, 1, -1, 7, 99, 100, -967, 12345, 1250050, 1234567890, MAX_AMOUNT, -MAX_AMOUNT]
    for code in ("USD", "EUR", "JPY", "KWD", "HUF", "ISK", "INR", "CHF", "XOF", "CLP", "XYZ"):
        for amount in amounts:
            assert format_amount(amount, code.lower(), locale) == babel_format(amount, code, locale)


def test_swiss_grouping_keeps_its_apostrophes() -> None:
    """Swiss locales group with an apostrophe, which Babel's pattern strips as quoting."""
    assert format_amount(1234567890, "chf", "de_CH") == "CHF\xa012'345'678.90"


def test_one_receipt_shows_every_amount_with_the_same_decimals() -> None:
    """One fractional forint and every forint amount on the receipt shows two decimals."""
    digits = receipt_digits("huf", [4900, 13750])
    assert [format_amount(a, "huf", "en_US", digits=digits) for a in (4900, 13750)] == [
        "HUF\xa049.00",
        "HUF\xa0137.50",
    ]
    assert receipt_digits("huf", [4900, 13700]) == 0
    assert receipt_digits("usd", [1]) == 2 and receipt_digits("jpy", [1]) == 0


@pytest.mark.parametrize(
    ("currency", "locale", "shown"),
    [
        ("kwd", "en_US", "KWD\xa012.340"),
        ("usd", "en_US", "$12.34"),
        ("cad", "en_US", "CA$12.34"),
        ("huf", "de_DE", "12,34\xa0HUF"),
    ],
)
def test_a_code_in_letters_stands_apart_from_the_number(
    currency: str, locale: str, shown: str
) -> None:
    """ICU's currency spacing: "KWD 12.340" (no-break), never "KWD12.340"; "$12.34" stays."""
    amount = 12340 if currency == "kwd" else 1234
    assert format_amount(amount, currency, locale) == shown
