"""The envelope every Stripe event carries, checked: what a receipt is derived from.

:func:`parse_event` checks the fields every event must have (id, type,
livemode, account, ``data.object``); the account and livemode it yields are
parts of the message key (``docs/architecture.md``, "The message key"). It is
a pure function of a decoded event, used by ingest, backfill and preview alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TypeGuard

# Stripe object ids (evt_…, acct_…, in_…) and event types, as far as we accept them.
STRIPE_ID = re.compile(r"[A-Za-z0-9_]{1,200}")
_EVENT_TYPE = re.compile(r"[a-z0-9_.]{1,100}")


def is_stripe_id(value: object, prefix: str) -> TypeGuard[str]:
    """``value`` is a Stripe id of this kind: ``prefix`` and at least one more character
    ("acct_" alone names no account)."""
    return (
        isinstance(value, str)
        and value.startswith(prefix)
        and len(value) > len(prefix)
        and STRIPE_ID.fullmatch(value) is not None
    )


class MalformedEvent(ValueError):
    """A verified body that is not a usable Stripe event; the message says why."""


@dataclass(frozen=True, kw_only=True)
class EventHeader:
    """The envelope fields every verified event must carry."""

    event_id: str
    event_type: str
    account: str  # "platform" or the Connect account id
    livemode: bool
    created: int | None
    data_object: dict[str, Any]

    @property
    def mode(self) -> str:
        return "live" if self.livemode else "test"


def parse_event(event: object) -> EventHeader:
    """Check the envelope of a decoded event; raise MalformedEvent if unusable."""
    if not isinstance(event, dict):
        raise MalformedEvent("body is not a JSON object")
    event_id = event.get("id")
    if not is_stripe_id(event_id, "evt_"):
        raise MalformedEvent("event has no valid 'id'")
    event_type = event.get("type")
    if not isinstance(event_type, str) or not _EVENT_TYPE.fullmatch(event_type):
        raise MalformedEvent("event has no valid 'type'")
    livemode = event.get("livemode")
    if not isinstance(livemode, bool):
        raise MalformedEvent("event has no boolean 'livemode'")
    account = event.get("account")
    if account is None:
        account = "platform"
    elif not is_stripe_id(account, "acct_"):
        raise MalformedEvent("event 'account' is not a Connect account id")
    data = event.get("data")
    data_object = data.get("object") if isinstance(data, dict) else None
    if not isinstance(data_object, dict):
        raise MalformedEvent("event has no 'data.object'")
    created = event.get("created")
    return EventHeader(
        event_id=event_id,
        event_type=event_type,
        account=account,
        livemode=livemode,
        created=created if isinstance(created, int) and not isinstance(created, bool) else None,
        data_object=data_object,
    )
