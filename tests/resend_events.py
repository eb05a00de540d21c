"""Real-shaped Resend delivery events (webhooks), signed as Resend signs them (Svix)."""

from __future__ import annotations

import base64
import itertools
import json
from datetime import UTC, datetime
from typing import Any

from flask.testing import FlaskClient
from standardwebhooks import Webhook

SECRET = "whsec_" + base64.b64encode(b"receipts-resend-test-secret-32by").decode()
_ids = itertools.count(1)


def event(
    event_type: str, email_id: str, created_at: str = "2026-11-30T01:00:00.000Z"
) -> dict[str, Any]:
    """The shape Resend posts: type, created_at, data.email_id (plus fields we ignore)."""
    return {
        "type": event_type,
        "created_at": created_at,
        "data": {
            "created_at": "2026-11-30T00:59:58.000000+00:00",
            "email_id": email_id,
            "from": "Billing <billing@example.com>",
            "to": ["jenny.rosen@example.com"],
            "subject": "Receipt for invoice ABC-0001",
        },
    }


def post(
    client: FlaskClient,
    document: dict[str, Any] | bytes,
    *,
    svix_id: str | None = None,
    secret: str = SECRET,
    signed_at: datetime | None = None,
) -> Any:
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    svix_id = svix_id or f"msg_test{next(_ids)}"
    stamp = signed_at or datetime.now(UTC)
    signature = Webhook(secret).sign(svix_id, stamp, body.decode())
    return client.post(
        "/webhooks/resend",
        data=body,
        headers={
            "svix-id": svix_id,
            "svix-timestamp": str(int(stamp.timestamp())),
            "svix-signature": signature,
            "Content-Type": "application/json",
        },
    )
