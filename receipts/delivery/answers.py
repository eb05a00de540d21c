"""What one answer from the provider says, read the way Resend writes it.

:func:`classify_response` turns an HTTP answer into a :class:`ProviderAnswer`:
the status, the error name of Resend's body ``{"statusCode", "name",
"message"}``, the id of an accepted email, ``Retry-After`` and the
``ratelimit-*`` headers (https://resend.com/docs/api-reference/rate-limit).
A send that got no answer is a :class:`ProviderAnswer` with our name for the
failure and no status. What each answer does is decided in one place,
``receipts.delivery.decisions``.
"""

from __future__ import annotations

import email.utils
import json
import math
import re
import time
from dataclasses import dataclass
from typing import Any

# 409 answers Resend gives for a reused Idempotency-Key.
KEY_IN_PROGRESS = "concurrent_idempotent_requests"
KEY_REUSED_WITH_OTHER_BODY = "invalid_idempotent_request"
# Our names for sends that got no HTTP answer.
TIMEOUT = "timeout"
CONNECTION_ERROR = "connection_error"


@dataclass(frozen=True, kw_only=True)
class ProviderAnswer:
    """What one send attempt came to: the provider's answer, or the network failure."""

    http_status: int | None = None  # None: no answer (timeout, connection error)
    provider_id: str | None = None  # the id of an accepted email (a 2xx body's "id")
    error: str | None = None  # the provider's error name, or ours for network failures
    message: str | None = None  # the provider's error message, one line (for operators)
    api_key_refused: bool = False  # the error's message says the API key is invalid
    retry_after: float | None = None  # seconds the provider asked us to wait
    rate_limit_limit: int | None = None  # requests the provider allows per window
    rate_limit_remaining: int | None = None
    rate_limit_reset: float | None = None  # seconds until the provider's window resets
    reply_code: int | None = None  # an SMTP server's reply code (SMTP has no HTTP status)

    @property
    def accepted(self) -> bool:
        """A 2xx carrying the email's id (or, over SMTP, an accepted message's id):
        the provider took the message."""
        status = self.http_status
        return bool(self.provider_id) and (status is None or 200 <= status < 300)


def classify_response(status: int, headers: Any, body: bytes) -> ProviderAnswer:
    """The facts of one HTTP answer, read the way Resend writes them.

    The error name is the body's ``name`` when it is a short machine name
    (else ``http_<status>``); its free-text ``message`` is kept, one line, for
    the operator who reads the attempt (never logged: Resend names the refused
    address in it), and looked at for what the name does not say (the key is
    invalid).
    """
    document = json_object(body)
    retry_after = _seconds(headers.get("Retry-After"))
    limit = _integer(headers.get("ratelimit-limit"))
    remaining = _integer(headers.get("ratelimit-remaining"))
    reset = _seconds(headers.get("ratelimit-reset"))
    if 200 <= status < 300:
        provider_id = document.get("id")
        accepted = isinstance(provider_id, str) and bool(provider_id)
        return ProviderAnswer(
            http_status=status,
            provider_id=provider_id if accepted else None,
            error=None if accepted else "no_provider_id",
            retry_after=retry_after,
            rate_limit_limit=limit,
            rate_limit_remaining=remaining,
            rate_limit_reset=reset,
        )
    return ProviderAnswer(
        http_status=status,
        error=_error_name(document, status),
        message=_error_message(document),
        api_key_refused=_says_api_key_invalid(document.get("message")),
        retry_after=retry_after,
        rate_limit_limit=limit,
        rate_limit_remaining=remaining,
        rate_limit_reset=reset,
    )


_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def _error_message(document: dict[str, Any]) -> str | None:
    """The provider's ``message`` for a person to read: one line, at most 300 characters."""
    message = document.get("message")
    if not isinstance(message, str):
        return None
    return _UNPRINTABLE.sub(" ", message).strip()[:300] or None


def _says_api_key_invalid(message: Any) -> bool:
    """Resend's ``validation_error`` "API key is invalid" (400 on a malformed key)."""
    return isinstance(message, str) and "api key" in message.lower()


def json_object(body: bytes) -> dict[str, Any]:
    """The JSON object in ``body``, or an empty one when it is anything else."""
    try:
        document = json.loads(body) if body else {}
    except (ValueError, UnicodeDecodeError):
        return {}
    return document if isinstance(document, dict) else {}


_ERROR_NAME = re.compile(r"[a-z0-9_]{1,64}")


def _error_name(document: dict[str, Any], status: int) -> str:
    """The provider's machine-readable error name; never its free-text message."""
    name = document.get("name")
    if isinstance(name, str) and _ERROR_NAME.fullmatch(name):
        return name
    return f"http_{status}"


def _seconds(value: str | None) -> float | None:
    """A delay in seconds from a header (delta-seconds or an HTTP date).

    ``inf`` (or a number too large for a float) is kept as infinity, for the
    caller to cap; what is not a number or a date is None.
    """
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isnan(seconds):
        return max(0.0, seconds)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _integer(value: str | None) -> int | None:
    try:
        number = int(value.strip()) if value is not None else None
    except ValueError:
        return None
    return number if number is None or number >= 0 else None


def one_line(message: Any) -> str | None:
    """A provider's free-text message for a person to read: one line, at most 300 characters."""
    return _error_message({"message": message})


def header_seconds(value: str | None) -> float | None:
    """A delay in seconds from a header (delta-seconds or an HTTP date); see ``_seconds``."""
    return _seconds(value)


# Our name for a batch answer whose ids cannot be matched to the batch's emails.
BATCH_ANSWER_UNREADABLE = "batch_answer_unreadable"


@dataclass(frozen=True, kw_only=True)
class BatchItem:
    """What a batch answer says about the email at one index: its id, or why it was refused."""

    provider_id: str | None = None
    error_message: str | None = None  # the provider's words, one line


@dataclass(frozen=True, kw_only=True)
class BatchAnswer:
    """One answer to a batch request: the request's facts, and per index what became of it.

    ``items`` is None unless the answer is a 2xx whose ids and errors account for
    every email of the batch exactly once; then ``answer`` is an accepted answer
    (its ``provider_id`` the first id, if any) and the batch is done. Otherwise
    ``answer`` is read as a single send's would be, and stands for every row."""

    answer: ProviderAnswer
    items: tuple[BatchItem, ...] | None = None


def classify_batch_response(status: int, headers: Any, body: bytes, size: int) -> BatchAnswer:
    """Read Resend's batch answer: ``{"data": [{"id"}…], "errors": [{"index", "message"}…]}``.

    With ``x-batch-validation: permissive``, ``data`` lists the created emails in
    request order and ``errors`` the refused ones by index (Resend API reference,
    "Send Batch Emails"; "Batch validation modes"). A 2xx that does not account
    for every index once cannot say which email an id belongs to: it counts as a
    2xx without an id (retried with the same key, which replays it)."""
    answer = classify_response(status, headers, body)
    if not 200 <= status < 300:
        return BatchAnswer(answer=answer)
    items = _batch_items(json_object(body), size)
    if items is None:
        return BatchAnswer(
            answer=ProviderAnswer(
                http_status=status,
                error=BATCH_ANSWER_UNREADABLE,
                retry_after=answer.retry_after,
                rate_limit_limit=answer.rate_limit_limit,
                rate_limit_remaining=answer.rate_limit_remaining,
                rate_limit_reset=answer.rate_limit_reset,
            )
        )
    first_id = next((item.provider_id for item in items if item.provider_id), None)
    accepted = ProviderAnswer(
        http_status=status,
        provider_id=first_id or "batch",
        retry_after=answer.retry_after,
        rate_limit_limit=answer.rate_limit_limit,
        rate_limit_remaining=answer.rate_limit_remaining,
        rate_limit_reset=answer.rate_limit_reset,
    )
    return BatchAnswer(answer=accepted, items=items)


def _batch_items(document: dict[str, Any], size: int) -> tuple[BatchItem, ...] | None:
    """Per index: the id or the refusal; None unless every index is accounted for once."""
    data, errors = document.get("data"), document.get("errors", [])
    if not isinstance(data, list) or not isinstance(errors, list):
        return None
    refused: dict[int, str] = {}
    for error in errors:
        index = error.get("index") if isinstance(error, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < size:
            return None
        if index in refused:
            return None
        refused[index] = one_line(error.get("message")) or "refused by the provider"
    ids = [email.get("id") if isinstance(email, dict) else None for email in data]
    if len(ids) + len(refused) != size or not all(isinstance(i, str) and i for i in ids):
        return None
    created = iter(ids)
    return tuple(
        BatchItem(error_message=refused[index])
        if index in refused
        else BatchItem(provider_id=str(next(created)))
        for index in range(size)
    )
