"""What else a paid invoice says about itself: fields, notes, tax ids, how it was settled.

The merchant writes ``custom_fields`` (up to four name/value pairs: "PO
number"), ``description`` (a memo) and ``footer`` on the invoice itself; the
receipt repeats them. Tax ids: the customer's own (``customer_tax_ids``, with
their values) and the merchant's (``account_tax_ids``, whose values the
payload carries only when expanded). ``paid_out_of_band``: the merchant marked
the invoice paid outside Stripe (a bank transfer they received, a cheque),
and ``amount_paid`` stayed 0. Since 2025-03-31.basil the flag is gone and
``amount_paid`` counts such payments, so those receipts read as paid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from receipts.receipt.invoice_values import dicts
from receipts.receipt.untrusted import one_line

MAX_CUSTOM_FIELDS = 4  # Stripe's own limit per invoice


@dataclass(frozen=True, kw_only=True)
class InvoiceDetails:
    custom_fields: tuple[tuple[str, str], ...]  # (name, value), as the merchant wrote them
    memo: str | None  # the invoice's description
    footer: str | None
    customer_tax_ids: tuple[str, ...]  # "DE123456789"
    merchant_tax_ids: tuple[str, ...]
    paid_out_of_band: bool | None  # None: the payload does not say


NO_DETAILS = InvoiceDetails(
    custom_fields=(),
    memo=None,
    footer=None,
    customer_tax_ids=(),
    merchant_tax_ids=(),
    paid_out_of_band=None,
)


def read_details(invoice: dict[str, Any]) -> InvoiceDetails:
    flag = invoice.get("paid_out_of_band")
    return InvoiceDetails(
        custom_fields=_custom_fields(invoice.get("custom_fields")),
        memo=one_line(invoice.get("description"), 500),
        footer=one_line(invoice.get("footer"), 500),
        customer_tax_ids=_tax_id_values(invoice.get("customer_tax_ids")),
        merchant_tax_ids=_tax_id_values(invoice.get("account_tax_ids")),
        paid_out_of_band=flag if isinstance(flag, bool) else None,
    )


def _custom_fields(value: object) -> tuple[tuple[str, str], ...]:
    found = []
    for field in dicts(value)[:MAX_CUSTOM_FIELDS]:
        name, text = one_line(field.get("name"), 40), one_line(field.get("value"), 140)
        if name and text:
            found.append((name, text))
    return tuple(found)


def _tax_id_values(value: object) -> tuple[str, ...]:
    """Each tax id's value; ids given only as ``txi_…`` strings have none to show."""
    values = (one_line(entry.get("value"), 60) for entry in dicts(value))
    return tuple(dict.fromkeys(found for found in values if found))
