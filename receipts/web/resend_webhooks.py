"""``POST /webhooks/resend``: what happened to a sent receipt after Resend took it.

Resend signs its webhooks with Svix (``svix-id``, ``svix-timestamp``,
``svix-signature``; 5-minute tolerance), verified by the ``svix`` library over
the raw body. Each ``svix-id`` is stored once, so a redelivered event changes
nothing. The event is matched to the outbox row by Resend's email id (our
``provider_id``) and may set ``delivery_status``; it never changes ``status``.

Events arrive out of order, so a status only replaces a less final one:
delayed < delivered < bounced < complained. A late "delayed" never hides a
"delivered" or a "bounced". Events for an email id we do not know are stored
as ``unknown_email``, answered 200 (Resend retrying cannot help) and counted.
"""

from __future__ import annotations

import binascii
import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask import Blueprint, Flask, Response, current_app, jsonify, request
from svix.webhooks import Webhook, WebhookVerificationError

from receipts.config import ConfigError, Settings
from receipts.db import Connection, DatabaseUnavailable
from receipts.logs import log_fields
from receipts.web import metrics
from receipts.web.services import services

log = logging.getLogger("receipts.web")

blueprint = Blueprint("resend_webhooks", __name__)

# Resend event type -> the delivery_status it sets.
DELIVERY_STATUSES = {
    "email.delivery_delayed": "delayed",
    "email.delivered": "delivered",
    "email.bounced": "bounced",
    "email.complained": "complained",
}
_FINALITY_SQL = """CASE delivery_status WHEN 'delayed' THEN 1 WHEN 'delivered' THEN 2
                   WHEN 'bounced' THEN 3 WHEN 'complained' THEN 4 ELSE 0 END"""
_FINALITY = {"delayed": 1, "delivered": 2, "bounced": 3, "complained": 4}
_SIGNATURE_HEADERS = ("svix-id", "svix-timestamp", "svix-signature")
_EXTENSION = "receipts_resend_webhook"


class Rejected(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, kw_only=True)
class DeliveryEvent:
    svix_id: str
    event_type: str
    email_id: str | None
    occurred_at: datetime | None
    message_tag: str | None = None  # our message_key tag, as Resend echoes it


def init_app(app: Flask, settings: Settings) -> None:
    """Register the route; a malformed secret stops start-up with its name."""
    verifier = None
    if settings.resend_webhook_secret:
        try:
            verifier = Webhook(settings.resend_webhook_secret)
        except Exception as exc:  # the library raises several unrelated types for this
            raise ConfigError(
                "RESEND_WEBHOOK_SECRET", f"is not a valid whsec_… secret ({type(exc).__name__})"
            ) from None
    app.extensions[_EXTENSION] = verifier
    app.register_blueprint(blueprint)


@blueprint.post("/webhooks/resend")
def receive_resend_event() -> tuple[Response, int]:
    started = time.perf_counter()
    event_type, outcome = "unknown", "rejected"
    try:
        event = _verified_event()
        event_type = metrics.event_type_label(event.event_type, DELIVERY_STATUSES)
        with services().database.transaction() as conn:
            outcome = record_delivery_event(conn, event)
    except Rejected as rejected:
        outcome = "unconfigured" if rejected.status == 503 else "rejected"
        log_fields(
            log,
            "resend webhook rejected",
            logging.WARNING,
            status=rejected.status,
            reason=rejected.reason,
        )
        metrics.count_webhook("resend", event_type, outcome, rejected.status, started)
        return jsonify(error=rejected.reason), rejected.status
    except DatabaseUnavailable as exc:
        log_fields(log, "resend webhook not stored", logging.ERROR, reason=str(exc))
        metrics.count_webhook("resend", event_type, "unavailable", 503, started)
        return jsonify(error="database unavailable, retry later"), 503
    except Exception:
        metrics.count_webhook("resend", event_type, "error", 500, started)
        raise
    level = logging.WARNING if outcome == "unknown_email" else logging.INFO
    log_fields(
        log,
        "resend webhook",
        level,
        svix_id=event.svix_id,
        type=event.event_type,
        email_id=event.email_id,
        outcome=outcome,
        ms=round((time.perf_counter() - started) * 1000, 1),
    )
    metrics.count_webhook("resend", event_type, outcome, 200, started)
    return jsonify(received=True, outcome=outcome), 200


def _verified_event() -> DeliveryEvent:
    verifier: Webhook | None = current_app.extensions[_EXTENSION]
    if verifier is None:
        raise Rejected(
            503, "Resend delivery webhooks are not configured: set RESEND_WEBHOOK_SECRET"
        )
    body = request.get_data(cache=False)
    headers = {name: request.headers.get(name, "") for name in _SIGNATURE_HEADERS}
    missing = [name for name, value in headers.items() if not value]
    if missing:
        raise Rejected(400, f"missing {', '.join(missing)} header(s)")
    try:
        verifier.verify(body, headers)
    except WebhookVerificationError as exc:
        raise Rejected(400, f"signature not verified: {exc}") from None
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise Rejected(400, "malformed svix-signature header") from None
    return _parse(body, headers["svix-id"])


def _parse(body: bytes, svix_id: str) -> DeliveryEvent:
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        raise Rejected(400, "body is not JSON") from None
    if not isinstance(document, dict) or not isinstance(document.get("type"), str):
        raise Rejected(400, "not a Resend event: no 'type'")
    data = document.get("data")
    if not isinstance(data, dict):
        raise Rejected(400, "not a Resend event: no 'data' object")
    email_id = data.get("email_id")
    if email_id is not None and not isinstance(email_id, str):
        raise Rejected(400, "'data.email_id' is not a string")
    return DeliveryEvent(
        svix_id=svix_id[:200],
        event_type=document["type"][:100],
        email_id=email_id[:200] if email_id else None,
        occurred_at=_timestamp(document.get("created_at")),
        message_tag=_message_tag(data.get("tags")),
    )


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
    return value[:256] if isinstance(value, str) else None


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def record_delivery_event(conn: Connection, event: DeliveryEvent) -> str:
    """Store the event once and apply it; return what it did.

    ``duplicate`` (this svix-id was seen), ``ignored`` (a type we do not
    track), ``applied``, ``stale`` (the row already has a more final status),
    or ``unknown_email``.
    """
    first = conn.execute(
        """INSERT INTO resend_events
               (svix_id, event_type, email_id, message_tag, outcome, occurred_at)
           VALUES (%s, %s, %s, %s, 'ignored', %s)
           ON CONFLICT (svix_id) DO NOTHING RETURNING svix_id""",
        (event.svix_id, event.event_type, event.email_id, event.message_tag, event.occurred_at),
    ).fetchone()
    if first is None:
        return "duplicate"
    status = DELIVERY_STATUSES.get(event.event_type)
    if status is None or event.email_id is None:
        return "ignored"
    outcome, key = _apply(conn, event, status)
    conn.execute(
        "UPDATE resend_events SET outcome = %s, message_key = %s WHERE svix_id = %s",
        (outcome, key, event.svix_id),
    )
    return outcome


def _apply(conn: Connection, event: DeliveryEvent, status: str) -> tuple[str, str | None]:
    updated = conn.execute(
        f"""UPDATE email_outbox
            SET delivery_status = %(status)s,
                delivery_status_at = coalesce(%(at)s, now()), updated_at = now()
            WHERE provider_id = %(email_id)s AND status = 'sent'
              AND ({_FINALITY_SQL} < %(rank)s
                   OR ({_FINALITY_SQL} = %(rank)s
                       AND delivery_status_at < coalesce(%(at)s, now())))
            RETURNING message_key""",
        {
            "status": status,
            "at": event.occurred_at,
            "email_id": event.email_id,
            "rank": _FINALITY[status],
        },
    ).fetchone()
    if updated is not None:
        return "applied", updated["message_key"]
    known = conn.execute(
        "SELECT message_key FROM email_outbox WHERE provider_id = %s LIMIT 1", (event.email_id,)
    ).fetchone()
    if known is not None:
        return "stale", known["message_key"]
    return "unknown_email", None
