"""Verify a Stripe webhook delivery and turn it into a checked event envelope.

The signature is checked over the raw request bytes, before any JSON parsing,
against every configured secret (rotation, and separate platform and Connect
endpoints). ``stripe.WebhookSignature.verify_header`` does the check; we pass
the tolerance explicitly because its default checks no timestamp at all, and
refuse timestamps more than the tolerance ahead ourselves, since it only
checks the past.

:func:`parse_event` then checks the envelope every event must carry (id, type,
livemode, account, ``data.object``): the account and livemode it yields are
parts of the message key (``docs/architecture.md``, "The message key").
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TOLERANCE_SECONDS = 300
_OUTSIDE_TOLERANCE = f"signature timestamp outside the {TOLERANCE_SECONDS} s tolerance"

# Stripe object ids (evt_…, acct_…, in_…) and event types, as far as we accept them.
STRIPE_ID = re.compile(r"[A-Za-z0-9_]{1,200}")
_EVENT_TYPE = re.compile(r"[a-z0-9_.]{1,100}")


class RejectedDelivery(Exception):
    """A delivery we refuse (a 4xx, or 503 while unconfigured); nothing about it is stored."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def verify_signature(body: bytes, header: str | None, secrets: Sequence[str]) -> str:
    """Return the body as text if any secret signed it recently; else raise 400."""
    import stripe  # here: a process that reads events but never verifies one skips it

    if not header:
        raise RejectedDelivery(400, "missing Stripe-Signature header")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise RejectedDelivery(400, "body is not UTF-8") from None
    failures = []
    for secret in secrets:
        try:
            stripe.WebhookSignature.verify_header(text, header, secret, TOLERANCE_SECONDS)
        except stripe.SignatureVerificationError as exc:
            failures.append(str(exc))
            continue
        if _signed_at(header) > time.time() + TOLERANCE_SECONDS:
            # verify_header only refuses the past: a signature dated ahead would
            # keep a captured delivery replayable until that date.
            raise RejectedDelivery(400, _OUTSIDE_TOLERANCE)
        return text
    raise RejectedDelivery(400, _describe(failures))


def _signed_at(header: str) -> int:
    """The signed ``t=`` of a header ``verify_header`` accepted, parsed as it parses it."""
    items = [item.split("=", 2) for item in header.split(",")]
    return int(next(item[1] for item in items if item[0] == "t"))


def _describe(failures: list[str]) -> str:
    """One short reason; a stale but correctly signed delivery says so."""
    if any("tolerance" in failure for failure in failures):
        return _OUTSIDE_TOLERANCE
    if any("Unable to extract" in failure for failure in failures):
        return "malformed Stripe-Signature header"
    if any("expected scheme" in failure for failure in failures):
        return "Stripe-Signature header has no v1 signature"
    return "no signature matches a configured secret"


# Stripe's events nest about ten levels deep. A deeper body is refused before
# anything walks it recursively (the fingerprint, the stored payload): Python's
# recursion limit is near 1,000 and the JSON parser accepts almost that much.
MAX_DEPTH = 64

# JSON may escape a lone UTF-16 surrogate ("\ud800") that no database text
# column can store. Once parsed, any surrogate code point left is a lone one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_shape(text: str, event: object) -> None:
    """Refuse nesting beyond MAX_DEPTH and lone surrogates, without recursion.

    Only bodies that could hold either pay for the walk: more brackets than
    the depth bound, or a surrogate escape somewhere in the text.
    """
    could_nest = text.count("[") + text.count("{") > MAX_DEPTH
    could_hold_surrogate = _SURROGATE_ESCAPE.search(text) is not None
    if not (could_nest or could_hold_surrogate):
        return
    pending: list[tuple[object, int]] = [(event, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, str):
            if could_hold_surrogate and _SURROGATE.search(value):
                raise RejectedDelivery(400, "body contains a \\u escape that is not valid Unicode")
            continue
        if not isinstance(value, dict | list):
            continue
        if depth > MAX_DEPTH:
            raise RejectedDelivery(400, f"body nests deeper than {MAX_DEPTH} levels")
        items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        pending.extend((item, depth + 1) for item in items)


def decode_event(text: str) -> tuple[EventHeader, dict[str, Any]]:
    """Parse verified text into the event envelope; raise 400 if it is not one."""
    try:
        event = json.loads(text)
    except (ValueError, RecursionError):
        raise RejectedDelivery(400, "body is not JSON") from None
    _check_shape(text, event)
    try:
        header = parse_event(event)
    except MalformedEvent as exc:
        raise RejectedDelivery(400, f"not a Stripe event: {exc}") from None
    return header, event


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
    if (
        not isinstance(event_id, str)
        or not event_id.startswith("evt_")
        or not STRIPE_ID.fullmatch(event_id)
    ):
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
    elif (
        not isinstance(account, str)
        or not account.startswith("acct_")
        or not STRIPE_ID.fullmatch(account)
    ):
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
