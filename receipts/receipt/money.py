"""Amounts as Stripe sends them (integers in a currency's minor unit), shown with Babel.

Stripe's minor unit is not always ISO 4217's nor CLDR's:

* zero-decimal currencies (JPY, KRW, …) are sent in whole units;
* three-decimal currencies (BHD, JOD, KWD, OMR, TND) in thousandths;
* every other currency in hundredths, including ISK and HUF, which CLDR gives
  no decimals: an ISK amount of ``50000`` is 500 krónur.

An amount is shown with as many decimals as the locale shows for its currency
(CLDR) when that loses nothing, and otherwise with Stripe's: a fractional
forint shows two decimals ("HUF12,500.50", never "HUF12,500.5" nor a rounded
"HUF12,501"). Amounts are bounded by :data:`MAX_AMOUNT`, far beyond anything
Stripe accepts: a larger value is refused before formatting, so an absurd
amount sends its invoice to review instead of failing the webhook.
"""

from __future__ import annotations

import re
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


def format_amount(amount: int, currency: str, locale: str | Locale) -> str:
    """Format an amount in Stripe's minor unit, e.g. (1999, 'usd', 'en_US') -> '$19.99'."""
    if not is_amount(amount):
        raise ValueError(f"not an amount Stripe sends: {amount!r}")
    code = currency.upper()
    exponent, shown = _digits(code)
    whole_at_shown = shown >= exponent or amount % 10 ** (exponent - shown) == 0
    return _shape(str(locale), code, shown if whole_at_shown else exponent).apply(amount, exponent)


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

    def affix(text: str) -> str:
        # The standard patterns use the symbol (¤); Babel also knows the code (¤¤)
        # and the plural name (¤¤¤), which no standard pattern uses.
        text = text.replace("\u00a4\u00a4\u00a4", code).replace("\u00a4\u00a4", code)
        text = text.replace("\u00a4", symbol)
        return re.sub(r"'([^']*)'", lambda m: m.group(1) or "'", text)

    return _Shape(
        prefixes=(affix(pattern.prefix[0]), affix(pattern.prefix[1])),
        suffixes=(affix(pattern.suffix[0]), affix(pattern.suffix[1])),
        group=get_group_symbol(parsed),
        decimal=get_decimal_symbol(parsed),
        grouping=pattern.grouping,
        min_int=pattern.int_prec[0],
        digits=digits,
    )
