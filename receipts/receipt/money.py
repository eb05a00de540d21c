"""Amounts as Stripe sends them (integers in a currency's minor unit), shown with Babel.

Stripe's minor unit is not always ISO 4217's nor CLDR's:

* zero-decimal currencies (JPY, KRW, …) are sent in whole units;
* three-decimal currencies (BHD, JOD, KWD, OMR, TND) in thousandths;
* every other currency in hundredths, including ISK and HUF, which CLDR gives
  no decimals: an ISK amount of ``50000`` is 500 krónur.

An amount is shown with as many decimals as the locale shows for its currency
(CLDR) when that loses nothing, and otherwise with Stripe's: a fractional
forint shows two decimals ("HUF 12,500.50", never "HUF 12,500.5" nor a rounded
"HUF 12,501"). One receipt decides once for all its amounts
(:func:`receipt_digits`), so "HUF 49" never stands next to "HUF 137.50".
A currency shown by its letters is kept apart from the number by a no-break
space, as ICU's currency spacing does ("KWD 12.340", never "KWD12.340").
Amounts are bounded by :data:`MAX_AMOUNT`, far beyond anything Stripe
accepts: a larger value is refused before formatting, so an absurd amount
sends its invoice to review instead of failing the webhook.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from babel import Locale
from babel.numbers import (
    get_currency_precision,
    get_currency_symbol,
    get_decimal_symbol,
    get_group_symbol,
)

# https://docs.stripe.com/currencies#zero-decimal and #three-decimal
ZERO_DECIMAL = frozenset(
    [
        "BIF",
        "CLP",
        "DJF",
        "GNF",
        "JPY",
        "KMF",
        "KRW",
        "MGA",
        "PYG",
        "RWF",
        "UGX",
        "VND",
        "VUV",
        "XAF",
        "XOF",
        "XPF",
    ]
)
THREE_DECIMAL = frozenset(["BHD", "JOD", "KWD", "OMR", "TND"])

# Stripe caps one charge at twelve digits in any currency; a hundred times that
# still formats exactly (Decimal's default context keeps 28 digits). A larger
# value is not an amount Stripe sent, and the invoice goes to review.
MAX_AMOUNT = 10**14


def is_amount(value: object) -> bool:
    """An integer amount Stripe could have sent (negative for credits)."""
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_AMOUNT


def minor_unit_exponent(currency: str) -> int:
    """How many decimals Stripe's integer amounts carry in ``currency``."""
    code = currency.upper()
    if code in ZERO_DECIMAL:
        return 0
    if code in THREE_DECIMAL:
        return 3
    return 2


def format_amount(
    amount: int, currency: str, locale: str | Locale, *, digits: int | None = None
) -> str:
    """Format an amount in Stripe's minor unit, e.g. (1999, 'usd', 'en_US') -> '$19.99'.

    ``digits``: the decimals to show, as :func:`receipt_digits` chose them for
    every amount of one receipt; by default, what this amount alone needs.
    """
    if not is_amount(amount):
        raise ValueError(f"not an amount Stripe sends: {amount!r}")
    code = currency.upper()
    exponent = _digits(code)[0]
    shown = receipt_digits(currency, (amount,)) if digits is None else digits
    return _shape(str(locale), code, shown).apply(amount, exponent)


def receipt_digits(currency: str, amounts: Iterable[int]) -> int:
    """The decimals every amount of one receipt is shown with.

    CLDR's for the currency when no amount has a fraction at that precision,
    else Stripe's: one fractional forint shows every forint amount with two.
    """
    exponent, shown = _digits(currency.upper())
    if shown >= exponent:
        return shown
    unit = 10 ** (exponent - shown)
    return shown if all(amount % unit == 0 for amount in amounts) else exponent


@dataclass(frozen=True, kw_only=True)
class _Shape:
    """One locale's currency format for one currency and number of decimals, read once.

    It applies CLDR's standard currency pattern exactly as Babel's
    ``NumberPattern.apply`` does (``tests/unit/test_money.py`` compares the
    two), with the symbols looked up once instead of for every amount:
    Babel's lookups were three quarters of the cost of a receipt's amounts.
    """

    prefixes: tuple[str, str]  # positive, negative
    suffixes: tuple[str, str]
    group: str
    decimal: str
    grouping: tuple[int, int]
    min_int: int
    digits: int

    def apply(self, amount: int, exponent: int) -> str:
        units = abs(amount)
        if self.digits >= exponent:
            scaled = units * 10 ** (self.digits - exponent)
        else:
            scaled = units // 10 ** (exponent - self.digits)  # whole at these digits
        text = str(scaled).rjust(self.digits + 1, "0")
        whole, fraction = (
            (text[: -self.digits], text[-self.digits :]) if self.digits else (text, "")
        )
        number = self._grouped(whole.rjust(self.min_int, "0"))
        if fraction:
            number += self.decimal + fraction
        negative = int(amount < 0)
        return self.prefixes[negative] + number + self.suffixes[negative]

    def _grouped(self, digits: str) -> str:
        size, grouped = self.grouping[0], ""
        while len(digits) > size:
            grouped = self.group + digits[-size:] + grouped
            digits = digits[:-size]
            size = self.grouping[1]
        return digits + grouped


@lru_cache(maxsize=512)
def _digits(code: str) -> tuple[int, int]:
    """(Stripe's decimals, the decimals CLDR shows) for a currency."""
    return minor_unit_exponent(code), get_currency_precision(code)


@lru_cache(maxsize=1024)
def _shape(locale: str, code: str, digits: int) -> _Shape:
    parsed = Locale.parse(locale)
    pattern = parsed.currency_formats["standard"]
    symbol = get_currency_symbol(code, parsed)

    def affix(text: str, *, before_number: bool) -> str:
        # The standard patterns use the symbol (¤); Babel also knows the code (¤¤)
        # and the plural name (¤¤¤), which no standard pattern uses.
        text = text.replace("\u00a4\u00a4\u00a4", code).replace("\u00a4\u00a4", code)
        if before_number and text.endswith("\u00a4") and _needs_spacing(symbol[-1:]):
            text = text[:-1] + symbol + NO_BREAK_SPACE
        elif not before_number and text.startswith("\u00a4") and _needs_spacing(symbol[:1]):
            text = NO_BREAK_SPACE + symbol + text[1:]
        text = text.replace("\u00a4", symbol)
        return re.sub(r"'([^']*)'", lambda m: m.group(1) or "'", text)

    return _Shape(
        prefixes=(
            affix(pattern.prefix[0], before_number=True),
            affix(pattern.prefix[1], before_number=True),
        ),
        suffixes=(
            affix(pattern.suffix[0], before_number=False),
            affix(pattern.suffix[1], before_number=False),
        ),
        group=get_group_symbol(parsed),
        decimal=get_decimal_symbol(parsed),
        grouping=pattern.grouping,
        min_int=pattern.int_prec[0],
        digits=digits,
    )


NO_BREAK_SPACE = "\u00a0"


def _needs_spacing(character: str) -> bool:
    """ICU's currency spacing: a symbol that is no sign and no space stands apart from digits."""
    return bool(character) and unicodedata.category(character)[0] not in "SZ"
