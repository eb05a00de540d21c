"""Stripe API objects shaped as the API returns them today, and thin notifications.

Field sets follow Stripe's own OpenAPI fixtures (``openapi/fixtures3.json`` of
github.com/stripe/openapi, API version 2026-10-28): an invoice has no
``charge`` any more (its payments are listed at ``/v1/invoice_payments``), a
line list carries ``has_more`` and its own ``url``, a charge keeps the card in
``payment_method_details``. ``tests.stripe_events.invoice`` is the older
snapshot shape that webhooks of accounts on earlier API versions carry.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from tests.stripe_events import sign

_counter = itertools.count(1)
PAID_AT = 1764460800


def line(invoice_id: str, amount: int, n: int) -> dict[str, Any]:
    return {
        "id": f"il_1Line{n:04d}{invoice_id[-6:]}",
        "object": "line_item",
        "amount": amount,
        "currency": "usd",
        "description": f"Seat {n}",
        "discount_amounts": [],
        "discountable": True,
        "discounts": [],
        "invoice": invoice_id,
        "livemode": False,
        "metadata": {},
        "parent": {"type": "invoice_item_details", "invoice_item_details": {"proration": False}},
        "period": {"end": PAID_AT, "start": PAID_AT - 30 * 86400},
        "pretax_credit_amounts": [],
        "pricing": {"type": "price_details", "unit_amount_decimal": str(amount)},
        "quantity": 1,
        "subtotal": amount,
        "taxes": [],
    }


def invoice(
    *,
    invoice_id: str | None = None,
    customer: str = "cus_1Jenny",
    email: str | None = "jenny.rosen@example.com",
    amount: int = 1999,
    lines: int = 1,
    shown_lines: int | None = None,
    status: str = "paid",
    livemode: bool = False,
    created: int = PAID_AT - 600,
) -> dict[str, Any]:
    """An invoice as ``GET /v1/invoices/{id}`` returns it; ``shown_lines`` < ``lines`` cuts
    the embedded list short (``has_more``) as Stripe does past its first handful."""
    n = next(_counter)
    invoice_id = invoice_id or f"in_1Api{n:06d}Xyz"
    share = amount // lines
    every_line = [line(invoice_id, share if i else amount - share * (lines - 1), i)
                  for i in range(lines)]  # fmt: skip
    shown = every_line[: shown_lines if shown_lines is not None else lines]
    return {
        "id": invoice_id,
        "object": "invoice",
        "account_country": "US",
        "account_name": "Example Inc.",
        "amount_due": amount,
        "amount_overpaid": 0,
        "amount_paid": amount if status == "paid" else 0,
        "amount_remaining": 0 if status == "paid" else amount,
        "attempt_count": 1,
        "attempted": True,
        "billing_reason": "subscription_cycle",
        "collection_method": "charge_automatically",
        "created": created,
        "currency": "usd",
        "customer": customer,
        "customer_email": email,
        "customer_name": "Jenny Rosen",
        "hosted_invoice_url": f"https://invoice.stripe.com/i/acct_1Test/test_{invoice_id}?s=ap",
        "invoice_pdf": f"https://pay.stripe.com/invoice/acct_1Test/test_{invoice_id}/pdf?s=ap",
        "lines": {
            "object": "list",
            "data": shown,
            "has_more": len(shown) < len(every_line),
            "total_count": len(every_line),
            "url": f"/v1/invoices/{invoice_id}/lines",
        },
        "livemode": livemode,
        "metadata": {},
        "number": f"API-{n:04d}",
        "parent": {
            "type": "subscription_details",
            "subscription_details": {"metadata": {}, "subscription": "sub_1Test"},
        },
        "status": status,
        "status_transitions": {
            "finalized_at": created + 60,
            "marked_uncollectible_at": None,
            "paid_at": PAID_AT if status == "paid" else None,
            "voided_at": None,
        },
        "subtotal": amount,
        "total": amount,
        "total_excluding_tax": amount,
        "_all_lines": every_line,  # the fake API serves these at /lines; stripped on output
    }


def customer(
    customer_id: str = "cus_1Jenny",
    *,
    email: str | None = "jenny.rosen@example.com",
    preferred_locales: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "id": customer_id,
        "object": "customer",
        "balance": 0,
        "created": PAID_AT - 86400 * 90,
        "currency": "usd",
        "email": email,
        "invoice_prefix": "7FE1103",
        "livemode": False,
        "metadata": {},
        "name": "Jenny Rosen",
        "preferred_locales": preferred_locales or [],
        "tax_exempt": "none",
    }


def charge(charge_id: str, *, brand: str = "visa", last4: str = "4242") -> dict[str, Any]:
    return {
        "id": charge_id,
        "object": "charge",
        "amount": 1999,
        "captured": True,
        "currency": "usd",
        "livemode": False,
        "paid": True,
        "payment_method": "pm_1Card",
        "payment_method_details": {
            "type": "card",
            "card": {
                "brand": brand,
                "country": "US",
                "exp_month": 8,
                "exp_year": 2030,
                "funding": "credit",
                "last4": last4,
                "network": brand,
            },
        },
        "status": "succeeded",
    }


def payment_intent(payment_intent_id: str, latest_charge: str) -> dict[str, Any]:
    return {
        "id": payment_intent_id,
        "object": "payment_intent",
        "amount": 1999,
        "amount_received": 1999,
        "currency": "usd",
        "latest_charge": latest_charge,
        "livemode": False,
        "payment_method_types": ["card"],
        "status": "succeeded",
    }


def invoice_payment(invoice_id: str, payment: dict[str, Any]) -> dict[str, Any]:
    """``payment`` is e.g. ``{"type": "payment_intent", "payment_intent": "pi_…"}``."""
    return {
        "id": f"inpay_1{next(_counter):06d}",
        "object": "invoice_payment",
        "amount_paid": 1999,
        "amount_requested": 1999,
        "created": PAID_AT,
        "currency": "usd",
        "invoice": invoice_id,
        "is_default": True,
        "livemode": False,
        "payment": payment,
        "status": "paid",
        "status_transitions": {"canceled_at": None, "paid_at": PAID_AT},
    }


def payment_record(
    record_id: str, *, brand: str = "mastercard", last4: str = "4444"
) -> dict[str, Any]:
    return {
        "id": record_id,
        "object": "payment_record",
        "amount": {"currency": "usd", "value": 1999},
        "livemode": False,
        "payment_method_details": {
            "type": "card",
            "card": {"brand": brand, "last4": last4},
            "billing_details": None,
        },
        "reported_by": "user",
    }


def off_stripe_record(
    record_id: str, *, amount: int, reference: str = "Wire 2291"
) -> dict[str, Any]:
    """A payment the merchant recorded as made outside Stripe (a bank transfer)."""
    return {
        "id": record_id,
        "object": "payment_record",
        "amount": {"currency": "usd", "value": amount},
        "livemode": False,
        "payment_method_details": {
            "type": "custom",
            "custom": {"display_name": "Bank transfer", "type": "cpmt_1Wire"},
            "billing_details": None,
        },
        "processor_details": {"type": "custom", "custom": {"payment_reference": reference}},
        "reported_by": "user",
    }


def tax_id(tax_id_id: str, *, kind: str = "eu_vat", value: str = "FR40303265045") -> dict[str, Any]:
    """An account's tax id as ``GET /v1/tax_ids/{id}`` returns it."""
    return {
        "id": tax_id_id,
        "object": "tax_id",
        "country": value[:2] if kind == "eu_vat" else None,
        "created": PAID_AT - 86400 * 365,
        "customer": None,
        "livemode": False,
        "owner": {"type": "self", "customer": None},
        "type": kind,
        "value": value,
        "verification": None,
    }


def product(product_id: str, name: str) -> dict[str, Any]:
    """A product as ``GET /v1/products/{id}`` returns it."""
    return {
        "id": product_id,
        "object": "product",
        "active": True,
        "created": PAID_AT - 86400 * 200,
        "default_price": None,
        "description": None,
        "images": [],
        "livemode": False,
        "marketing_features": [],
        "metadata": {},
        "name": name,
        "package_dimensions": None,
        "shippable": None,
        "statement_descriptor": None,
        "tax_code": None,
        "unit_label": None,
        "updated": PAID_AT - 86400 * 200,
        "url": None,
    }


def thin_notification(
    invoice_id: str,
    *,
    context: str | None = None,
    event_id: str | None = None,
    livemode: bool = False,
    event_type: str = "v1.invoice.paid",
    snapshot_event: str | None = None,
) -> dict[str, Any]:
    """A ``v2.core.event`` notification as an event destination delivers it."""
    n = next(_counter)
    body: dict[str, Any] = {
        "id": event_id or f"evt_test_65Thin{n:08d}",
        "object": "v2.core.event",
        "type": event_type,
        "livemode": livemode,
        "created": "2026-11-29T23:20:01.123Z",
        "related_object": {
            "id": invoice_id,
            "type": "invoice",
            "url": f"/v1/invoices/{invoice_id}",
        },
        "reason": {"type": "request", "request": {"id": f"req_{n:06d}", "idempotency_key": None}},
    }
    if context is not None:
        body["context"] = context
    if snapshot_event is not None:
        body["snapshot_event"] = snapshot_event
    return body


def signed(body: dict[str, Any], secret: str) -> tuple[bytes, dict[str, str]]:
    """The bytes and headers of a delivery, signed as Stripe signs every event."""
    data = json.dumps(body).encode()
    return data, {"Stripe-Signature": sign(data, secret), "Content-Type": "application/json"}


def refund(
    refund_id: str,
    charge_id: str,
    payment_intent_id: str | None,
    *,
    amount: int = 1999,
    status: str = "succeeded",
    created: int = PAID_AT + 86400,
) -> dict[str, Any]:
    """A Refund as ``GET /v1/refunds/{id}`` and the ``refund.*`` events carry it."""
    return {
        "id": refund_id,
        "object": "refund",
        "amount": amount,
        "balance_transaction": f"txn_{refund_id[3:]}",
        "charge": charge_id,
        "created": created,
        "currency": "usd",
        "destination_details": {
            "type": "card",
            "card": {
                "reference_status": "pending",
                "reference_type": "acquirer_reference_number",
                "type": "refund",
            },
        },
        "metadata": {},
        "payment_intent": payment_intent_id,
        "reason": "requested_by_customer",
        "receipt_number": None,
        "source_transfer_reversal": None,
        "status": status,
        "transfer_reversal": None,
    }


def refunded_charge(
    charge_id: str,
    payment_intent_id: str,
    refunds: list[dict[str, Any]],
    *,
    invoice_id: str | None = None,
    amount: int = 1999,
) -> dict[str, Any]:
    """A charge as ``charge.refunded`` carries it. With ``invoice_id``: the shape of API
    versions before 2022-11-15 (``invoice`` and the ``refunds`` list); without, today's
    (neither: the refunds are at ``/v1/refunds?charge=``, the invoice in its payments)."""
    refunded = sum(found["amount"] for found in refunds)
    document = {
        **charge(charge_id),
        "amount": amount,
        "amount_captured": amount,
        "amount_refunded": refunded,
        "payment_intent": payment_intent_id,
        "refunded": refunded >= amount,
    }
    if invoice_id is not None:
        document["invoice"] = invoice_id
        document["refunds"] = {
            "object": "list",
            "data": refunds,
            "has_more": False,
            "total_count": len(refunds),
            "url": f"/v1/charges/{charge_id}/refunds",
        }
    return document


def credit_note(
    credit_note_id: str,
    invoice_id: str,
    *,
    amount: int = 1999,
    refund_id: str | None = None,
    number: str = "ABC-0001-CN-01",
) -> dict[str, Any]:
    """A CreditNote as ``GET /v1/credit_notes/{id}`` returns it (``refunds`` as a list, as
    since 2025-03-31.basil); with ``refund_id`` the whole amount went back to the card."""
    return {
        "id": credit_note_id,
        "object": "credit_note",
        "amount": amount,
        "amount_shipping": 0,
        "created": PAID_AT + 86400,
        "currency": "usd",
        "customer": "cus_1Jenny",
        "customer_balance_transaction": None if refund_id else f"cbtxn_{credit_note_id[3:]}",
        "discount_amount": 0,
        "discount_amounts": [],
        "effective_at": PAID_AT + 86400,
        "invoice": invoice_id,
        "lines": {
            "object": "list",
            "data": [
                {
                    "id": f"cnli_{credit_note_id[3:]}",
                    "object": "credit_note_line_item",
                    "amount": amount,
                    "description": "Seat 1",
                    "discount_amount": 0,
                    "discount_amounts": [],
                    "livemode": False,
                    "quantity": 1,
                    "tax_rates": [],
                    "taxes": [],
                    "type": "custom_line_item",
                    "unit_amount": amount,
                    "unit_amount_decimal": str(amount),
                },
            ],
            "has_more": False,
            "url": f"/v1/credit_notes/{credit_note_id}/lines",
        },
        "livemode": False,
        "memo": None,
        "metadata": {},
        "number": number,
        "out_of_band_amount": None,
        "pdf": f"https://pay.stripe.com/credit_notes/acct_1Test/test_{credit_note_id}/pdf",
        "post_payment_amount": amount,
        "pre_payment_amount": 0,
        "reason": "requested_by_customer",
        "refunds": [{"amount_refunded": amount, "refund": refund_id, "type": "refund"}]
        if refund_id
        else [],
        "shipping_cost": None,
        "status": "issued",
        "subtotal": amount,
        "subtotal_excluding_tax": amount,
        "total": amount,
        "total_excluding_tax": amount,
        "total_taxes": [],
        "type": "post_payment",
        "voided_at": None,
    }
