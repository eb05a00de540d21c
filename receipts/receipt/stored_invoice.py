"""The part of a paid invoice a receipt is rendered from: what ingest stores.

An ``invoice.paid`` event carries the whole invoice, and an app may hang
almost anything on it: metadata on the invoice, its lines, its coupons and
its subscription, shipping details, a client secret. The worker renders the
email from the stored ``render_input`` (``receipts.receipt.payload``), so
storing the whole invoice made the outbox grow with whatever the app put
there (300 invoices of 1 MB each: 292 MB). Ingest now stores only the
invoice fields the receipt's readers take (:data:`RENDERED_FIELDS`), with
every ``metadata`` object left out at any depth. The fingerprints are taken
from the whole invoice before this, so what counts as a change is the same.

tests/unit/test_stored_invoice.py proves that every recorded invoice renders
the same email from the stored part as from the whole, and that the readers
read no field outside it.
"""

from __future__ import annotations

from typing import Any

# Top-level invoice fields the readers of receipts.receipt take (across API
# versions: some exist only in older or newer ones), and a few small ids a
# person reading a stored row looks for.
RENDERED_FIELDS = frozenset(
    {
        "id", "object", "livemode", "created", "status", "status_transitions", "effective_at",
        "number", "receipt_number", "customer", "subscription", "parent", "account_name",
        "account_tax_ids", "customer_name", "customer_email", "customer_address",
        "customer_tax_ids", "currency", "lines", "subtotal", "total", "amount_paid",
        "amount_paid_off_stripe", "amount_shipping", "shipping_cost", "tax", "tax_percent",
        "total_taxes", "total_tax_amounts", "default_tax_rates", "discount", "discounts",
        "total_discount_amounts", "total_pretax_credit_amounts", "starting_balance",
        "ending_balance", "pre_payment_credit_notes_amount", "paid_out_of_band", "charge",
        "payment_intent", "payments", "payment_settings", "custom_fields", "description", "footer",
        "hosted_invoice_url", "invoice_pdf",
    }
)  # fmt: skip
# Never read by a receipt, and the app's to fill: left out wherever it appears.
LEFT_OUT_EVERYWHERE = "metadata"


def stored_invoice(invoice: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``invoice`` a receipt is rendered from, without any metadata."""
    return {
        name: _without_metadata(value) for name, value in invoice.items() if name in RENDERED_FIELDS
    }


def _without_metadata(value: Any) -> Any:
    """A copy of ``value`` without any ``metadata`` key. Iterative: a hostile value
    nested thousands deep is copied, not a RecursionError."""
    top: list[Any] = [None]
    pending: list[tuple[Any, Any, Any]] = [(value, top, 0)]  # (item, its new parent, key)
    while pending:
        item, parent, key = pending.pop()
        copied: Any = item
        if isinstance(item, dict):
            copied = {}
            for name, inner in item.items():
                if name != LEFT_OUT_EVERYWHERE:
                    copied[name] = None  # keeps the order of the keys
                    pending.append((inner, copied, name))
        elif isinstance(item, list):
            copied = [None] * len(item)
            pending.extend((inner, copied, index) for index, inner in enumerate(item))
        parent[key] = copied
    return top[0]
