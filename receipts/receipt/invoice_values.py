"""Typed reads of single invoice fields, and the review reasons a bad one gives.

Stripe signs what it sends, so a field of the wrong type or an impossible
amount means the payload is not what Stripe's API produces: the invoice goes
to review with a reason instead of becoming a wrong email or a 500.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from receipts.receipt.money import is_amount
from receipts.vocabulary import ReviewReason

MISSING_CUSTOMER_EMAIL = ReviewReason.MISSING_CUSTOMER_EMAIL
INVALID_CUSTOMER_EMAIL = ReviewReason.INVALID_CUSTOMER_EMAIL
INVALID_HOSTED_INVOICE_URL = ReviewReason.INVALID_HOSTED_INVOICE_URL
INVALID_AMOUNT_PAID = ReviewReason.INVALID_AMOUNT_PAID
INVALID_CURRENCY = ReviewReason.INVALID_CURRENCY
INVALID_AMOUNTS = ReviewReason.INVALID_INVOICE_AMOUNTS


class UnusableInvoice(ValueError):
    """The invoice cannot become an email; ``reason`` is the review reason.

    ``detail``: what a person needs to see why, stored as the row's
    ``last_error``; numbers and field names only, never a customer's data.
    """

    def __init__(self, reason: str, *, detail: str | None = None) -> None:
        super().__init__(reason if detail is None else f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def optional_amount(value: object) -> int | None:
    """None when absent; the amount when Stripe could have sent it; else the invoice is unusable."""
    if value is None:
        return None
    if not is_amount(value):
        raise UnusableInvoice(INVALID_AMOUNTS)
    assert isinstance(value, int)
    return value


def required_amount(value: object) -> int:
    amount = optional_amount(value)
    if amount is None:
        raise UnusableInvoice(INVALID_AMOUNTS)
    return amount


def percentage(value: object) -> Decimal | None:
    """A percentage between 0 and 100 as Stripe sends it (a JSON number), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() and 0 <= number <= 100 else None


def is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_timestamp(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**33


def dicts(value: object) -> list[dict[str, Any]]:
    """The objects of a JSON list (anything else in it is skipped); [] if not a list."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def object_id(value: object) -> str | None:
    """The id of an expandable field: the string itself, or the expanded object's ``id``."""
    if isinstance(value, dict):
        value = value.get("id")
    return value if isinstance(value, str) else None
