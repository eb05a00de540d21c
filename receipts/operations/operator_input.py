"""Bounds on what operators type or import, each broken one reported on one line.

``receipts import`` and ``receipts review`` take times and names from a
person or from another system's log. They are stored and shown later, so they
must be values every reader can load and print: a time between
:data:`EARLIEST_SENT_AT` and now (plus :data:`CLOCK_SKEW`), a name on one
line. The messages are short and echo at most :data:`ECHO_LIMIT` characters
of what was given.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

# No receipt this product records was sent before this; an earlier time is a typo
# (or a year-1 time whose offset would be stored as a BC date no reader can load).
EARLIEST_SENT_AT = datetime(2000, 1, 1, tzinfo=UTC)
# How far ahead of this machine's clock another machine's "now" may be.
CLOCK_SKEW = timedelta(minutes=5)
MAX_OPERATOR_NAME = 200
ECHO_LIMIT = 60


class InvalidInput(ValueError):
    """An operator's value is out of bounds; the message says which and why, on one line."""


def shown(text: str) -> str:
    """``text`` quoted for a message, shortened to :data:`ECHO_LIMIT` characters."""
    if len(text) <= ECHO_LIMIT:
        return repr(text)
    return f"{text[:ECHO_LIMIT]!r}… ({len(text)} characters)"


def parse_sent_at(text: str, *, label: str, now: datetime | None = None) -> datetime:
    """An ISO 8601 time with an offset, between 2000-01-01 and now plus the clock skew."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"{label} {shown(text)} is not an ISO 8601 time") from None
    if value.tzinfo is None:
        raise InvalidInput(f"{label} {shown(text)} has no UTC offset (add Z or +00:00)")
    check_sent_at(value, label=f"{label} {shown(text)}", now=now)
    return value


def check_sent_at(value: datetime, *, label: str, now: datetime | None = None) -> None:
    """InvalidInput unless ``value`` lies between 2000-01-01 and now plus the clock skew."""
    if value < EARLIEST_SENT_AT:
        raise InvalidInput(f"{label} is before {EARLIEST_SENT_AT:%Y-%m-%d}")
    if value > (now or datetime.now(UTC)) + CLOCK_SKEW:
        raise InvalidInput(f"{label} is in the future")


def operator(name: str, *, source: str) -> str:
    """A person's name as recorded with a decision: stripped, non-blank, one printable line."""
    stripped = name.strip()
    if not stripped:
        raise InvalidInput(f"{source} must name who decides (it is blank)")
    if len(stripped) > MAX_OPERATOR_NAME or not stripped.isprintable():
        raise InvalidInput(
            f"{source} must be one line of at most {MAX_OPERATOR_NAME} printable characters"
        )
    return stripped
