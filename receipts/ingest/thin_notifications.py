"""Read a verified thin event notification with the library into the fields the product uses.

``parse_event_notification`` (here its variant for a body whose signature was
already checked against every configured secret) builds the library's typed
notification; this module checks what the message key depends on: an event
id, a type, ``livemode``, the invoice in ``related_object`` and the Connect
account that ``context`` names (its last segment), and raises
:class:`RejectedDelivery` when one is unusable, as for a malformed snapshot.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import stripe

from receipts.ingest import strict_json
from receipts.ingest.verification import RejectedDelivery
from receipts.receipt.event import EventHeader, is_stripe_id
from receipts.stripe_api.client import Scope

INVOICE_PAID = "v1.invoice.paid"
THIN_OBJECT = "v2.core.event"
_TYPE = re.compile(r"[a-z0-9_.]{1,100}")
# parse_event_notification binds each notification to a client for its fetch
# helpers; without STRIPE_API_KEY nothing is fetched, so no real key is needed.
PARSE_ONLY_KEY = "sk_parse_only_no_requests"


def looks_thin(text: str) -> bool:
    """True for a body whose ``object`` is a thin event; snapshots pay only a substring test."""
    if f'"{THIN_OBJECT}"' not in text:
        return False
    try:
        body = strict_json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(body, dict) and body.get("object") == THIN_OBJECT


@dataclass(frozen=True, kw_only=True)
class Notification:
    """The fields of a verified thin notification the product uses."""

    event_id: str
    event_type: str
    account: str  # "platform" or the Connect account its context names
    context: str | None
    livemode: bool
    created: int | None
    invoice_id: str
    body: dict[str, Any]

    def header(self, invoice: dict[str, Any]) -> EventHeader:
        return EventHeader(
            event_id=self.event_id,
            event_type=self.event_type,
            account=self.account,
            livemode=self.livemode,
            created=self.created,
            data_object=invoice,
        )

    @property
    def scope(self) -> Scope:
        return Scope(account=self.account, context=self.context)


def parse(text: str, parser: stripe.StripeClient) -> Notification:
    """Read verified text with the library; raise RejectedDelivery if it is not usable."""
    try:
        notification = parser.parse_event_notification_without_verification(text)
        body = strict_json.loads(text)
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except (ValueError, KeyError, TypeError, UnicodeEncodeError) as exc:
        raise RejectedDelivery(f"not a usable thin event notification: {exc}") from None
    if "\\u0000" in text:
        # The body is stored as jsonb, which cannot hold a NUL character.
        raise RejectedDelivery("thin event notification contains \\u0000")
    related = getattr(notification, "related_object", None)
    invoice_id = getattr(related, "id", None)
    problem = _problem(notification.id, notification.type, body, invoice_id)
    if problem is not None:
        raise RejectedDelivery(f"not a usable thin event notification: {problem}")
    context = str(notification.context) if notification.context else None
    account = _account(context)
    if account is None:
        raise RejectedDelivery("thin event context does not name a Connect account")
    return Notification(
        event_id=notification.id,
        event_type=notification.type,
        account=account,
        context=context,
        livemode=body["livemode"],
        created=_timestamp(notification.created),
        invoice_id=str(invoice_id or ""),
        body=body,
    )


def _problem(event_id: object, event_type: object, body: Any, invoice_id: object) -> str | None:
    if not is_stripe_id(event_id, "evt_"):
        return "no valid 'id'"
    if not isinstance(event_type, str) or not _TYPE.fullmatch(event_type):
        return "no valid 'type'"
    if not isinstance(body.get("livemode"), bool):
        return "no boolean 'livemode'"
    if event_type == INVOICE_PAID and not is_stripe_id(invoice_id, "in_"):
        return "'related_object.id' is not an invoice id"
    return None


def _account(context: str | None) -> str | None:
    """'platform' without a context; the Connect account its last segment names; else None."""
    if not context:
        return "platform"
    last = context.split("/")[-1]
    return last if is_stripe_id(last, "acct_") else None


def _timestamp(created: object) -> int | None:
    try:
        return int(datetime.fromisoformat(str(created)).astimezone(UTC).timestamp())
    except ValueError:
        return None
