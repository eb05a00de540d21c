"""What happened to a sent receipt after Resend took it: verify, parse, record.

Resend signs its webhooks with Svix (``svix-id``, ``svix-timestamp``,
``svix-signature``; 5-minute tolerance), verified over the raw body by
``standardwebhooks``, the library ``svix.webhooks`` wraps: the ``svix``
package itself also loads Svix's whole API client (httpx, pydantic) when
imported, about 16 MB in every web worker for one HMAC. Each ``svix-id`` is
stored once, so a redelivered event changes nothing. The event is matched to
the outbox row by Resend's email id (our ``provider_id``) and may set
``delivery_status``; it never changes ``status``.

Events arrive out of order, so a status only replaces a less final one, in
the order of :attr:`receipts.vocabulary.DeliveryStatus.rank`: a late "delayed"
never hides a "delivered" or a "bounced". ``email.failed`` and
``email.suppressed`` mean the customer got nothing: they set ``failed`` /
``suppressed`` with the reason Resend gives (``delivery_detail``).

An event about an email id no row has recorded is still evidence: if its
``message_key`` tag names a receipt, Resend accepted a send of that receipt
which the worker never recorded (it died after the provider answered), and
the event is stored as ``evidence`` for that receipt (``receipts review``
offers to resolve it with the id). Otherwise it is stored as
``unknown_email`` (a status event) or ``ignored`` (``email.sent`` and the
like: possibly another sender on the same Resend account). Every such event
is answered 200: Resend retrying cannot help. The statements are in
``receipts/queries/ingest.sql``; ``docs/architecture.md``, "Resend delivery
webhooks" and "Delivery statuses", describes the whole. No web framework
here: ``receipts.web.resend_webhooks`` is the route.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from psycopg.types.json import Jsonb
from standardwebhooks import Webhook, WebhookVerificationError

from receipts import queries
from receipts.config import ConfigError
from receipts.db import Connection
from receipts.ingest import strict_json
from receipts.ingest.verification import RejectedDelivery
from receipts.message_keys import invoice_id_in_tag
from receipts.vocabulary import DeliveryEventOutcome, DeliveryStatus

# Resend event type -> the delivery_status it sets.
DELIVERY_STATUSES = {
    "email.delivery_delayed": DeliveryStatus.DELAYED,
    "email.delivered": DeliveryStatus.DELIVERED,
    "email.bounced": DeliveryStatus.BOUNCED,
    "email.suppressed": DeliveryStatus.SUPPRESSED,
    "email.failed": DeliveryStatus.FAILED,
    "email.complained": DeliveryStatus.COMPLAINED,
}
# Events about an email Resend accepted: for an email id no row recorded, each
# is evidence that the receipt its tag names was sent.
EVIDENCE_TYPES = frozenset({*DELIVERY_STATUSES, "email.sent", "email.opened", "email.clicked"})
SIGNATURE_HEADERS = ("svix-id", "svix-timestamp", "svix-signature")

# What a delivery did: a stored ``resend_events.outcome``, or ``duplicate``.
Outcome = DeliveryEventOutcome | Literal["duplicate"]

# What is kept of the reason Resend gives: short machine words.
_DETAIL_CHARACTERS = re.compile(r"[^A-Za-z0-9_ ./:-]")

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
    detail: str | None = None  # why it failed, was suppressed or bounced, as Resend says
    email_created_at: datetime | None = None  # data.created_at: when Resend accepted it


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
    """The event, if Svix's headers sign this raw body; else RejectedDelivery."""
    signed = {name: headers.get(name, "") for name in SIGNATURE_HEADERS}
    missing = [name for name, value in signed.items() if not value]
    if missing:
        raise RejectedDelivery(f"missing {', '.join(missing)} header(s)")
    if not _SIGNATURE_ENTRY.search(signed["svix-signature"]):
        raise RejectedDelivery("malformed svix-signature header")
    try:
        verifier.verify(body, _standard_names(signed), json_parse=False)
    except WebhookVerificationError as exc:
        raise RejectedDelivery(f"signature not verified: {exc}") from None
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise RejectedDelivery("malformed svix-signature header") from None
    return parse(body, signed["svix-id"])


# One entry of the signature header: a version, a comma, a base64 signature. Checked
# here because the library's versions disagree on what garbage raises.
_SIGNATURE_ENTRY = re.compile(r"(?:^|\s)v\d+,[A-Za-z0-9+/]+={0,2}(?:\s|$)")


def _standard_names(signed: Mapping[str, str]) -> dict[str, str]:
    """Svix's header names as the Standard Webhooks names they are (``svix-id`` is
    ``webhook-id``...), as ``svix.webhooks`` passes them on."""
    return {"webhook" + name.removeprefix("svix"): value for name, value in signed.items()}


# Text no column can store (NUL, lone surrogates) or that has no business in
# an id, a type or a tag (control characters).
_UNSTORABLE = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")


def parse(body: bytes, svix_id: str) -> DeliveryEvent:
    """The fields we keep of a verified body; RejectedDelivery if it is no Resend event."""
    try:
        document = strict_json.loads(body)
    except (ValueError, RecursionError):
        raise RejectedDelivery("body is not JSON") from None
    if not isinstance(document, dict) or not isinstance(document.get("type"), str):
        raise RejectedDelivery("not a Resend event: no 'type'")
    data = document.get("data")
    if not isinstance(data, dict):
        raise RejectedDelivery("not a Resend event: no 'data' object")
    email_id = data.get("email_id")
    if email_id is not None and not isinstance(email_id, str):
        raise RejectedDelivery("'data.email_id' is not a string")
    return DeliveryEvent(
        svix_id=_storable(svix_id, "svix-id", 200),
        event_type=_storable(document["type"], "type", 100),
        email_id=_storable(email_id, "data.email_id", 200) if email_id else None,
        occurred_at=_timestamp(document.get("created_at")),
        message_tag=_message_tag(data.get("tags")),
        detail=_detail(data),
        email_created_at=_timestamp(data.get("created_at")),
    )


def _storable(value: str, field: str, limit: int) -> str:
    """``value`` cut to ``limit``; RejectedDelivery if it holds unstorable text."""
    if _UNSTORABLE.search(value):
        raise RejectedDelivery(f"{field!r} holds control characters or invalid Unicode")
    return value[:limit]


def _detail(data: dict[str, Any]) -> str | None:
    """The reason Resend gives: ``failed.reason``, ``suppressed.reason`` (and its
    type), ``bounce.type``/``subType``; short machine words, never its message."""
    failed, suppressed, bounce = (data.get(name) for name in ("failed", "suppressed", "bounce"))
    parts: list[Any] = []
    if isinstance(failed, dict):
        parts = [failed.get("reason")]
    elif isinstance(suppressed, dict):
        parts = [suppressed.get("reason"), suppressed.get("type")]
    elif isinstance(bounce, dict):
        parts = [bounce.get("type"), bounce.get("subType")]
    words = [_DETAIL_CHARACTERS.sub("", part)[:60] for part in parts if isinstance(part, str)]
    return "/".join(word for word in words if word) or None


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


def record_delivery_event(conn: Connection, event: DeliveryEvent) -> Outcome:
    """Store the event once and apply it; return what it did.

    ``duplicate`` (this svix-id was seen), ``applied`` (the row's delivery
    status moved), ``stale`` (the row already has a more final status, or is
    not sent), ``evidence`` (no row has this email id, but its tag names a
    receipt), ``unknown_email`` (a status event for an email nobody has), or
    ``ignored`` (a type we do not track, no email id, or nothing to do).
    """
    first = conn.execute(
        _Q["insert_resend_event"],
        {
            "svix_id": event.svix_id,
            "event_type": event.event_type,
            "email_id": event.email_id,
            "message_tag": event.message_tag,
            "outcome": DeliveryEventOutcome.IGNORED,
            "occurred_at": event.occurred_at,
            "detail": event.detail,
            "email_created_at": event.email_created_at,
        },
    ).fetchone()
    if first is None:
        return "duplicate"
    if event.email_id is None or event.event_type not in EVIDENCE_TYPES:
        return DeliveryEventOutcome.IGNORED
    outcome, key = _apply(conn, event, event.email_id)
    conn.execute(
        _Q["record_resend_outcome"], {"outcome": outcome, "key": key, "svix_id": event.svix_id}
    )
    return outcome


def _apply(
    conn: Connection, event: DeliveryEvent, email_id: str
) -> tuple[DeliveryEventOutcome, str | None]:
    status = DELIVERY_STATUSES.get(event.event_type)
    if status is not None:
        updated = conn.execute(
            _Q["set_delivery_status"],
            {
                "status": status,
                "rank": status.rank,
                "ranks": _RANKS,
                "occurred_at": event.occurred_at,
                "detail": event.detail,
                "email_id": email_id,
            },
        ).fetchone()
        if updated is not None:
            return DeliveryEventOutcome.APPLIED, updated["message_key"]
    known = conn.execute(_Q["outbox_key_for_email_id"], {"email_id": email_id}).fetchone()
    if known is not None:
        stale = DeliveryEventOutcome.STALE if status else DeliveryEventOutcome.IGNORED
        return stale, known["message_key"]
    named = receipt_named_by_tag(conn, event.message_tag)
    if named is not None:
        return DeliveryEventOutcome.EVIDENCE, named
    if status is None:
        return DeliveryEventOutcome.IGNORED, None
    return DeliveryEventOutcome.UNKNOWN_EMAIL, None


def receipt_named_by_tag(conn: Connection, tag: str | None) -> str | None:
    """The one receipt whose message key gives this Resend tag, if exactly one does.

    A tag is the key with every character Resend refuses turned into ``_``
    (:func:`receipts.message_keys.provider_tag`), so it is looked up through
    the invoice id it carries and compared whole.
    """
    invoice_id = invoice_id_in_tag(tag)
    if invoice_id is None:
        return None
    found = conn.execute(_Q["receipts_for_tag"], {"invoice_id": invoice_id, "tag": tag}).fetchall()
    return found[0]["message_key"] if len(found) == 1 else None
