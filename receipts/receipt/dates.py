"""Dates and times on a receipt, in the merchant's time zone and the reader's language.

Babel's CLDR patterns, with what a fluent reader would still correct: CLDR's
"atTime" joining of date and time, which Babel's data lacks, for languages
whose plain pattern runs the two together (Portuguese "3 de dezembro de 2025
às 01:02 UTC"), and French's "1er" for the first of the month.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time
from functools import lru_cache
from zoneinfo import ZoneInfo

from babel import Locale
from babel.dates import format_date, format_interval, format_time, get_datetime_format

NO_BREAK_SPACE = "\u00a0"
# CLDR's atTime pattern where the medium one is only "{1} {0}".
_AT_TIME = {"pt": "{1} às {0}"}
# A day "1" before a month's name or a range's dash: "1 déc." / "1-30 nov."
_FRENCH_FIRST = re.compile(r"(?<![\d.,:])1(?=[ \u00a0\u202f]*[\u2013-]|[ \u00a0\u202f]+[^\W\d])")


def format_moment(
    timestamp: int, timezone: ZoneInfo, locale: Locale, *, zone_with_time: bool = False
) -> str:
    """ "November 30, 2025, 12:00 AM UTC": the long date and short time in ``timezone``.

    ``zone_with_time``: a no-break space before the zone, so that a narrow
    column breaks the line after the date ("November 30, 2025," / "12:00 AM
    UTC") and never leaves the zone alone on a line (the text part shows an
    ordinary space).
    """
    moment = datetime.fromtimestamp(timestamp, tz=timezone)
    zone = moment.tzname() or ""
    return _moment(moment.date(), moment.hour, moment.minute, zone, locale, zone_with_time)


def format_day(timestamp: int, timezone: ZoneInfo, locale: Locale) -> str:
    """ "November 30, 2025": the long date alone."""
    day = datetime.fromtimestamp(timestamp, tz=timezone).date()
    return _french(str(format_date(day, "long", locale=locale)), locale)


def format_period(start: int, end: int, timezone: ZoneInfo, locale: Locale) -> str:
    """ "Nov 30 - Dec 30, 2025": the span a line covers, with the locale's dash."""
    first = datetime.fromtimestamp(start, tz=timezone).date()
    last = datetime.fromtimestamp(end, tz=timezone).date()
    return _period_dates(first, last, locale)


@lru_cache(maxsize=256)
def _moment(
    day: date, hour: int, minute: int, zone: str, locale: Locale, joined: bool = False
) -> str:
    # Cached by the minute: receipts arriving together share it.
    when = _AT_TIME.get(locale.language) or str(get_datetime_format("medium", locale=locale))
    clock = format_time(time(hour, minute), "short", locale=locale)
    shown = _french(str(format_date(day, "long", locale=locale)), locale)
    space = NO_BREAK_SPACE if joined else " "
    return when.replace("'", "").replace("{1}", shown).replace("{0}", f"{clock}{space}{zone}")


@lru_cache(maxsize=1024)
def _period_dates(start: date, end: date, locale: Locale) -> str:
    return _french(str(format_interval(start, end, "yMMMd", locale=locale)), locale)


def _french(text: str, locale: Locale) -> str:
    return _FRENCH_FIRST.sub("1er", text) if locale.language == "fr" else text
