"""What else a paid invoice says about itself: fields, notes, tax ids, how it was settled.

The merchant writes ``custom_fields`` (up to four name/value pairs: "PO
number"), ``description`` (a memo) and ``footer`` on the invoice itself; the
receipt repeats them. Tax ids, each with its type (``eu_vat``, ``us_ein``…):
the customer's own (``customer_tax_ids``, with their values) and the
merchant's (``account_tax_ids``: ``txi_…`` ids unless expanded; with a Stripe
API key ingest looks the ids up, :class:`~receipts.receipt.api_facts.ApiFacts`).

Paid outside Stripe (a bank transfer the merchant received, a cheque): before
2025-03-31.basil the invoice says ``paid_out_of_band`` and ``amount_paid``
stays 0. Since basil the flag is gone and ``amount_paid`` counts such
payments; an event's payload no longer tells them apart from a charge. The
payload says so only when it carries the invoice's payments (an invoice
retrieved with ``expand[]=payments.data.payment.payment_record``: a paid
payment whose payment record was processed outside Stripe,
``processor_details.type`` ``custom``) or ``amount_paid_off_stripe`` (an
includable field of 2026-05-27.dahlia, never in event payloads); with a
Stripe API key ingest reads the invoice's payments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from receipts.receipt.api_facts import MAX_TAX_IDS, ApiFacts, TaxId
from receipts.receipt.invoice_values import dicts, optional_amount
from receipts.receipt.untrusted import one_line

MAX_CUSTOM_FIELDS = 4  # Stripe's own limit per invoice


@dataclass(frozen=True, kw_only=True)
class InvoiceDetails:
    custom_fields: tuple[tuple[str, str], ...]  # (name, value), as the merchant wrote them
    memo: str | None  # the invoice's description
    footer: str | None
    customer_tax_ids: tuple[TaxId, ...]  # eu_vat DE123456789
    merchant_tax_ids: tuple[TaxId, ...]
    paid_out_of_band: bool | None  # None: the payload does not say
    # Tax ids of the merchant's the invoice names but whose values nobody told us.
    merchant_tax_ids_unknown: int = 0
    # Paid outside Stripe and counted in amount_paid (2025-03-31.basil and later),
    # when the payload or the API's facts say so; None: not known.
    paid_off_stripe: int | None = None


NO_DETAILS = InvoiceDetails(
    custom_fields=(),
    memo=None,
    footer=None,
    customer_tax_ids=(),
    merchant_tax_ids=(),
    paid_out_of_band=None,
)


def read_details(invoice: dict[str, Any], api_facts: ApiFacts | None = None) -> InvoiceDetails:
    """What the invoice says about itself, completed by what ingest looked up in the API."""
    known = api_facts or ApiFacts()
    flag = invoice.get("paid_out_of_band")
    account_ids = invoice.get("account_tax_ids")
    named = [found for found in account_ids if isinstance(found, str)][:MAX_TAX_IDS] if (
        isinstance(account_ids, list)
    ) else []  # fmt: skip
    merchant = _tax_ids([*dicts(account_ids), *_as_objects(known.merchant_tax_ids)])
    looked_up = len(known.merchant_tax_ids)
    off_stripe = None if flag is not None else _paid_off_stripe(invoice) or known.paid_off_stripe
    return InvoiceDetails(
        custom_fields=_custom_fields(invoice.get("custom_fields")),
        memo=one_line(invoice.get("description"), 500),
        footer=one_line(invoice.get("footer"), 500),
        customer_tax_ids=_tax_ids(dicts(invoice.get("customer_tax_ids"))),
        merchant_tax_ids=merchant,
        merchant_tax_ids_unknown=max(len(named) - looked_up, 0),
        paid_out_of_band=flag if isinstance(flag, bool) else None,
        paid_off_stripe=off_stripe,
    )


def _custom_fields(value: object) -> tuple[tuple[str, str], ...]:
    found = []
    for field in dicts(value)[:MAX_CUSTOM_FIELDS]:
        name, text = one_line(field.get("name"), 40), one_line(field.get("value"), 140)
        if name and text:
            found.append((name, text))
    return tuple(found)


def _as_objects(tax_ids: tuple[TaxId, ...]) -> list[dict[str, Any]]:
    return [{"type": found.kind, "value": found.value} for found in tax_ids]


def _tax_ids(entries: list[dict[str, Any]]) -> tuple[TaxId, ...]:
    """Each tax id with a value, once; ids given only as ``txi_…`` strings have none."""
    found: dict[str, TaxId] = {}
    for entry in entries[: MAX_TAX_IDS * 2]:
        value = one_line(entry.get("value"), 60)
        kind = entry.get("type")
        if value and value not in found:
            found[value] = TaxId(kind=kind if isinstance(kind, str) else None, value=value)
    return tuple(found.values())[:MAX_TAX_IDS]


def _paid_off_stripe(invoice: dict[str, Any]) -> int | None:
    """What the payload says was paid outside Stripe (API versions since basil), if it says."""
    stated = optional_amount(invoice.get("amount_paid_off_stripe"))
    if stated is not None:
        return stated
    payments = invoice.get("payments")
    listed = payments.get("data") if isinstance(payments, dict) else None
    if not isinstance(listed, list):
        return None
    total = 0
    for entry in dicts(listed):
        if entry.get("status") == "paid" and is_paid_off_stripe(entry.get("payment")):
            total += optional_amount(entry.get("amount_paid")) or 0
    return total


def is_paid_off_stripe(payment: object) -> bool:
    """An invoice payment's ``payment``: a payment record processed outside Stripe."""
    if not isinstance(payment, dict) or payment.get("type") != "payment_record":
        return False
    record = payment.get("payment_record")
    processor = record.get("processor_details") if isinstance(record, dict) else None
    return isinstance(processor, dict) and processor.get("type") == "custom"
