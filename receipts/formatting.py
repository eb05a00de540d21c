"""How the product prints times, durations and amounts for the people who operate it.

One module for commands, reports and log-facing messages alike, so that a
time reads the same in ``receipts status``, a refusal and a worker's line.
"""

from __future__ import annotations

from datetime import UTC, datetime


def iso(value: datetime | None) -> str:
    """``2024-05-01T12:00:00+00:00``, or ``-`` when there is no time."""
    return value.isoformat(timespec="seconds") if value is not None else "-"


def utc(when: datetime | float | None) -> str:
    """``2026-12-01 09:59 UTC`` for a time or a Unix timestamp, or ``-`` when there is none."""
    if when is None:
        return "-"
    if not isinstance(when, datetime):
        when = datetime.fromtimestamp(when, tz=UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def duration(seconds: float | None) -> str:
    """``2h 05m``, ``3m 07s``, ``-12m 00s`` (past due)."""
    if seconds is None:
        return "-"
    sign = "-" if seconds < 0 else ""
    whole = int(abs(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{sign}{days}d {hours:02d}h"
    if hours:
        return f"{sign}{hours}h {minutes:02d}m"
    return f"{sign}{minutes}m {secs:02d}s"


def money(amount: int | None, currency: str | None) -> str | None:
    """``$19.99``, ``¥500``: an amount in the currency's smallest unit, formatted for reading."""
    if amount is None or currency is None:
        return None
    from receipts.receipt.money import format_amount  # Babel loads only when an amount is shown

    try:
        return format_amount(amount, currency, "en_US")
    except (ValueError, ArithmeticError):
        return f"{amount} {currency.upper()} (smallest unit)"
