"""Verify a Stripe webhook delivery and decode it into a checked event envelope.

The signature is checked over the raw request bytes, before any JSON parsing,
against every configured secret (rotation, and separate platform and Connect
endpoints). ``stripe.WebhookSignature.verify_header`` does the check; we pass
the tolerance explicitly because its default checks no timestamp at all, and
refuse timestamps more than the tolerance ahead ourselves, since it only
checks the past. :func:`decode_event` then parses the text, bounded in depth,
and checks the envelope (:func:`receipts.receipt.event.parse_event`).

Anything refused raises :class:`RejectedDelivery`: the sender's request is
unusable and nothing about it is stored (the web answers 400).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

from receipts.ingest import strict_json
from receipts.receipt.event import EventHeader, MalformedEvent, parse_event

TOLERANCE_SECONDS = 300
_OUTSIDE_TOLERANCE = f"signature timestamp outside the {TOLERANCE_SECONDS} s tolerance"


class RejectedDelivery(Exception):
    """A delivery we refuse as unusable; nothing about it is stored. ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def verify_signature(body: bytes, header: str | None, secrets: Sequence[str]) -> str:
    """Return the body as text if any secret signed it recently; else RejectedDelivery."""
    import stripe  # here: a process that reads events but never verifies one skips it

    if not header:
        raise RejectedDelivery("missing Stripe-Signature header")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise RejectedDelivery("body is not UTF-8") from None
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
            raise RejectedDelivery(_OUTSIDE_TOLERANCE)
        return text
    raise RejectedDelivery(_describe(failures))


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
                raise RejectedDelivery("body contains a \\u escape that is not valid Unicode")
            continue
        if not isinstance(value, dict | list):
            continue
        if depth > MAX_DEPTH:
            raise RejectedDelivery(f"body nests deeper than {MAX_DEPTH} levels")
        items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        pending.extend((item, depth + 1) for item in items)


def decode_event(text: str) -> tuple[EventHeader, dict[str, Any]]:
    """Parse verified text into the event envelope; RejectedDelivery if it is not one."""
    try:
        event = strict_json.loads(text)
    except (ValueError, RecursionError):
        raise RejectedDelivery("body is not JSON") from None
    _check_shape(text, event)
    try:
        header = parse_event(event)
    except MalformedEvent as exc:
        raise RejectedDelivery(f"not a Stripe event: {exc}") from None
    return header, event
