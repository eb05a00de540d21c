"""Real-shaped Stripe events, signed exactly as Stripe signs them."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import time
from typing import Any

TEST_SECRET = "whsec_test_receipts_0123456789abcdef"
_counter = itertools.count(1)


def sign(body: bytes, secrets: str | list[str], timestamp: int | None = None) -> str:
    """A Stripe-Signature header: ``t=…,v1=…`` with one v1 per secret."""
    stamp = int(time.time()) if timestamp is None else timestamp
    signed = f"{stamp}.".encode() + body
    if isinstance(secrets, str):
        secrets = [secrets]
    parts = [f"t={stamp}"]
    parts += [
        "v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest() for secret in secrets
    ]
    return ",".join(parts)


def encode(event: dict[str, Any]) -> bytes:
    return json.dumps(event, indent=2).encode()


def invoice(**overrides: Any) -> dict[str, Any]:
    n = next(_counter)
    invoice_id = overrides.pop("id", f"in_1Test{n:06d}Abc")
    data: dict[str, Any] = {
        "id": invoice_id,
        "object": "invoice",
        "account_country": "US",
        "amount_due": 1999,
        "amount_paid": 1999,
        "amount_remaining": 0,
        "currency": "usd",
        "customer": "cus_Test123",
        "customer_email": "jenny.rosen@example.com",
        "customer_name": "Jenny Rosen",
        "hosted_invoice_url": f"https://invoice.stripe.com/i/acct_1Test/test_{invoice_id}?s=ap",
        "invoice_pdf": f"https://pay.stripe.com/invoice/acct_1Test/test_{invoice_id}/pdf?s=ap",
        "livemode": False,
        "number": f"ABC-{n:04d}",
        "paid": True,
        "status": "paid",
        "status_transitions": {"finalized_at": 1764460000, "paid_at": 1764460800},
        "total": 1999,
    }
    data.update(overrides)
    return data


def event(
    data_object: dict[str, Any] | None = None,
    *,
    type: str = "invoice.paid",
    account: str | None = None,
    livemode: bool = False,
    event_id: str | None = None,
) -> dict[str, Any]:
    n = next(_counter)
    body: dict[str, Any] = {
        "id": event_id or f"evt_1Test{n:08d}",
        "object": "event",
        "api_version": "2024-06-20",
        "created": 1764460801,
        "data": {"object": data_object if data_object is not None else invoice()},
        "livemode": livemode,
        "pending_webhooks": 1,
        "request": {"id": None, "idempotency_key": None},
        "type": type,
    }
    if account is not None:
        body["account"] = account
    return body
