"""What happened to a sent receipt after Resend took it: verify, parse, record.

Resend signs its webhooks with Svix (``svix-id``, ``svix-timestamp``,
``svix-signature``; 5-minute tolerance), verified by the ``svix`` library over
the raw body. Each ``svix-id`` is stored once, so a redelivered event changes
nothing. The event is matched to the outbox row by Resend's email id (our
``provider_id``) and may set ``delivery_status``; it never changes ``status``.

Events arrive out of order, so a status only replaces a less final one, in
the order of :attr:`receipts.vocabulary.DeliveryStatus.rank`: a late "delayed"
never hides a "delivered" or a "bounced". Events for an email id we do not
know are stored as ``unknown_email``, answered 200 (Resend retrying cannot
help) and counted. The statements are in ``receipts/queries/ingest.sql``;
``docs/architecture.md`` describes the outbox states. No web framework here:
``receipts.web.resend_webhooks`` is the route.
"""

from __future__ import annotations

import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from psycopg.types.json import Jsonb
from svix.webhooks import Webhook, WebhookVerificationError

from receipts import queries
from receipts.config import ConfigError
from receipts.db import Connection
from receipts.ingest.events import RejectedDelivery
from receipts.vocabulary import DeliveryStatus

# Resend event type -> the delivery_status it sets.
DELIVERY_STATUSES = {
    "email.delivery_delayed": DeliveryStatus.DELAYED,
    "email.delivered": DeliveryStatus.DELIVERED,
    "email.bounced": DeliveryStatus.BOUNCED,
    "email.complained": DeliveryStatus.COMPLAINED,
}
SIGNATURE_HEADERS = ("svix-id", "svix-timestamp", "svix-signature")

# ``resend_events.outcome``, and ``duplicate`` for an event stored already.
DeliveryEventOutcome = Literal["applied", "stale", "unknown_email", "ignored", "duplicate"]

_Q = queries.load("ingest")
# The finality order, handed to the set_delivery_status statement as data.
_RANKS = Jsonb({status.value: status.rank for status in DeliveryStatus})


@dataclass(frozen=True, kw_only=True)
class DeliveryEvent:
    svix_id: str
    event_type: str
    email_id: str | None
    occurred_at: datetime | None
    message_tag: str | None = None  # our message_key tag, as Resend echoes it


def signature_verifier(secret: str | None) -> Webhook | None:
    """The verifier for ``RESEND_WEBHOOK_SECRET``, None if unset; a malformed secret
    raises ConfigError with its name."""
    if not secret:
        return None
    try:
        return Webhook(secret)
    except Exception as exc:  # the library raises several unrelated types for this
        raise ConfigError(
            "RESEND_WEBHOOK_SECRET", f"is not a valid whsec_… secret ({type(exc).__name__})"
        ) from None


def verified_event(verifier: Webhook, body: bytes, headers: Mapping[str, str]) -> DeliveryEvent:
    """The event, if Svix's headers sign this raw body; else RejectedDelivery (400)."""
    signed = {name: headers.get(name, "") for name in SIGNATURE_HEADERS}
    missing = [name for name, value in signed.items() if not value]
    if missing:
        raise RejectedDelivery(400, f"missing {', '.join(missing)} header(s)")
    try:
        verifier.verify(body, signed)
    except WebhookVerificationError as exc:
        raise RejectedDelivery(400, f"signature not verified: {exc}") from None
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise RejectedDelivery(400, "malformed svix-signature header") from None
    return parse(body, signed["svix-id"])


# Text no column can store (NUL, lone surrogates) or that has no business in
# an id, a type or a tag (control characters).
_UNSTORABLE = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")


def parse(body: bytes, svix_id: str) -> DeliveryEvent:
    """The fields we keep of a verified body; RejectedDelivery (400) if it is no Resend event."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        raise RejectedDelivery(400, "body is not JSON") from None
    if not isinstance(document, dict) or not isinstance(document.get("type"), str):
        raise RejectedDelivery(400, "not a Resend event: no 'type'")
    data = document.get("data")
    if not isinstance(data, dict):
        raise RejectedDelivery(400, "not a Resend event: no 'data' object")
    email_id = data.get("email_id")
    if email_id is not None and not isinstance(email_id, str):
        raise RejectedDelivery(400, "'data.email_id' is not a string")
    return DeliveryEvent(
        svix_id=_storable(svix_id, "svix-id", 200),
        event_type=_storable(document["type"], "type", 100),
        email_id=_storable(email_id, "data.email_id", 200) if email_id else None,
        occurred_at=_timestamp(document.get("created_at")),
        message_tag=_message_tag(data.get("tags")),
    )


def _storable(value: str, field: str, limit: int) -> str:
    """``value`` cut to ``limit``; RejectedDelivery (400) if it holds unstorable text."""
    if _UNSTORABLE.search(value):
        raise RejectedDelivery(400, f"{field!r} holds control characters or invalid Unicode")
    return value[:limit]


def _message_tag(tags: Any) -> str | None:
    """The ``message_key`` tag: Resend echoes tags as {name: value} (or [{name, value}])."""
    if isinstance(tags, dict):
        value = tags.get("message_key")
    elif isinstance(tags, list):
        value = next(
            (
                tag.get("value")
                for tag in tags
                if isinstance(tag, dict) and tag.get("name") == "message_key"
            ),
            None,
        )
    else:
        value = None
    return _storable(value, "message_key tag", 256) if isinstance(value, str) else None


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def record_delivery_event(conn: Connection, event: DeliveryEvent) -> DeliveryEventOutcome:
    """Store the event once and apply it; return what it did.

    ``duplicate`` (this svix-id was seen), ``ignored`` (a type we do not
    track), ``applied``, ``stale`` (the row already has a more final status),
    or ``unknown_email``.
    """
    first = conn.execute(
        _Q["insert_resend_event"],
        {
            "svix_id": event.svix_id,
            "event_type": event.event_type,
            "email_id": event.email_id,
            "message_tag": event.message_tag,
            "outcome": "ignored",
            "occurred_at": event.occurred_at,
        },
    ).fetchone()
    if first is None:
        return "duplicate"
    status = DELIVERY_STATUSES.get(event.event_type)
    if status is None or event.email_id is None:
        return "ignored"
    outcome, key = _apply(conn, event, event.email_id, status)
    conn.execute(
        _Q["record_resend_outcome"], {"outcome": outcome, "key": key, "svix_id": event.svix_id}
    )
    return outcome


def _apply(
    conn: Connection, event: DeliveryEvent, email_id: str, status: DeliveryStatus
) -> tuple[DeliveryEventOutcome, str | None]:
    updated = conn.execute(
        _Q["set_delivery_status"],
        {
            "status": status,
            "rank": status.rank,
            "ranks": _RANKS,
            "occurred_at": event.occurred_at,
            "email_id": email_id,
        },
    ).fetchone()
    if updated is not None:
        return "applied", updated["message_key"]
    known = conn.execute(_Q["outbox_key_for_email_id"], {"email_id": email_id}).fetchone()
    if known is not None:
        return "stale", known["message_key"]
    return "unknown_email", None
