"""Resend: ``POST /emails`` with the message key as ``Idempotency-Key``, and batches.

Resend keeps an idempotency key for 24 hours (Resend API reference,
"Idempotency keys"): a retry with the same key and body replays the first
answer instead of sending again. Past that window the worker never retries
on its own; a receipt whose first attempt may have been accepted is first
looked up in Resend's list of sent emails (:meth:`ResendProvider.look_up`:
``GET /emails``, newest first, cursor pagination with ``after``, at most 100
per page; Resend API reference, "List Sent Emails", and the changelog entry
"List Sent Emails Endpoint"). The list carries no tags, so an email matches
by its recipients and its subject (which names the invoice), sent since the
first attempt.

With ``RECEIPTS_BATCH_SIZE`` above 1, :meth:`ResendProvider.send_batch` posts
up to 100 frozen emails as one JSON array to ``POST /emails/batch`` with the
batch's own ``Idempotency-Key`` (kept 24 hours, the same key with another body
answered 409 ``invalid_idempotent_request``; Resend changelog, "Batch
idempotency keys") and ``x-batch-validation: permissive``, so that an email
Resend refuses is named by its index while the others are sent (Resend docs,
"Batch validation modes").
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import requests
from requests.utils import check_header_validity

from receipts.delivery.answers import (
    CONNECTION_ERROR,
    TIMEOUT,
    BatchAnswer,
    ProviderAnswer,
    classify_batch_response,
    classify_response,
    json_object,
)
from receipts.delivery.providers.base import Guarantee, Lookup, Protection
from receipts.delivery.providers.http_transport import JsonEndpoint
from receipts.delivery.rules.resend import API_KEY_FIX, API_URL_FIX, RESEND
from receipts.environment import PROVIDER_KEY_RETENTION_HOURS

# Resend's documented default rate limit: 5 requests per second per team
# (Resend API reference, "Rate limit"). RECEIPTS_SEND_RATE defaults to it.
RESEND_DEFAULT_RATE = 5.0
# The sent list: the most emails per page, and the most pages one lookup reads
# (beyond them it cannot tell, and the row goes to a person as before).
LIST_PAGE_SIZE = 100
LIST_MAX_PAGES = 50
# Resend's answer to a key that may only send (the kind it recommends): the key
# is fine, the sent list just cannot be read with it.
SENDING_ONLY_KEY = "restricted_api_key"
# The most emails one POST /emails/batch takes (Resend API reference, "Send Batch Emails").
RESEND_MAX_BATCH = 100

GUARANTEE = Guarantee(
    protection=Protection.IDEMPOTENCY_KEY,
    window_hours=PROVIDER_KEY_RETENTION_HOURS,
    can_look_up=True,
)


class ResendProvider:
    """``POST {api_url}/emails``; see the module docstring."""

    name = "resend"
    default_rate = RESEND_DEFAULT_RATE
    guarantee = GUARANTEE
    answers = RESEND
    max_batch = RESEND_MAX_BATCH

    def __init__(
        self,
        *,
        api_url: str,
        api_key: str,
        connect_timeout: float,
        read_timeout: float,
        pool_size: int = 8,
    ) -> None:
        self._api_url = api_url.rstrip("/")
        self._endpoint = JsonEndpoint(
            url=self._api_url + "/emails",
            headers={"Authorization": f"Bearer {api_key}"},
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            pool_size=pool_size,
            setting="RESEND_API_URL",
        )
        self._batch_endpoint = JsonEndpoint(
            url=self._api_url + "/emails/batch",
            headers={"Authorization": f"Bearer {api_key}", "x-batch-validation": "permissive"},
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            pool_size=pool_size,
            setting="RESEND_API_URL",
        )

    def send_batch(self, batch_key: str, body: bytes, size: int) -> BatchAnswer:
        """``POST /emails/batch``: ``body`` is the JSON array of ``size`` frozen emails."""
        try:
            check_header_validity(("Idempotency-Key", batch_key))
            response = self._batch_endpoint.post(body, {"Idempotency-Key": batch_key})
        except requests.Timeout:
            return BatchAnswer(answer=ProviderAnswer(error=TIMEOUT))
        except requests.ConnectionError:
            return BatchAnswer(answer=ProviderAnswer(error=CONNECTION_ERROR))
        except requests.RequestException as exc:
            return BatchAnswer(answer=ProviderAnswer(error=type(exc).__name__))
        return classify_batch_response(
            response.status_code, response.headers, response.content, size
        )

    def send(self, message_key: str, payload: bytes) -> ProviderAnswer:
        try:
            check_header_validity(("Idempotency-Key", message_key))
            response = self._endpoint.post(payload, {"Idempotency-Key": message_key})
        except requests.Timeout:
            return ProviderAnswer(error=TIMEOUT)
        except requests.ConnectionError:
            return ProviderAnswer(error=CONNECTION_ERROR)
        except requests.RequestException as exc:
            return ProviderAnswer(error=type(exc).__name__)
        return classify_response(response.status_code, response.headers, response.content)

    def look_up(
        self, message_key: str, payload: bytes, *, since: datetime, deadline: float
    ) -> Lookup:
        """The id of an email Resend lists as sent since ``since`` to the payload's
        recipients with its subject; reads pages back to ``since`` (or gives up)."""
        document = json_object(payload)
        wanted = _recipients(document.get("to")), str(document.get("subject", ""))
        searched = f"Resend's sent list back to {since.isoformat(timespec='seconds')}"
        after: str | None = None
        for _ in range(LIST_MAX_PAGES):
            page = self._page(after, deadline)
            if isinstance(page, Lookup):
                return Lookup(
                    error=page.error,
                    http_status=page.http_status,
                    permanent=page.permanent,
                    fix=page.fix,
                    searched=searched,
                )
            emails, has_more = page
            for email in emails:
                if _matches(email, wanted, since):
                    return Lookup(provider_id=str(email["id"]), http_status=200, searched=searched)
            oldest = _created_at(emails[-1]) if emails else None
            if not has_more or not emails or (oldest is not None and oldest < since):
                return Lookup(http_status=200, searched=searched)
            after = str(emails[-1].get("id"))
        return Lookup(error="sent_list_too_long", permanent=True, searched=searched)

    def _page(
        self, after: str | None, deadline: float
    ) -> tuple[list[dict[str, Any]], bool] | Lookup:
        left = deadline - time.monotonic()
        if left <= 0.5:
            return Lookup(error="lookup_out_of_time")
        params: dict[str, str | int] = {"limit": LIST_PAGE_SIZE}
        if after:
            params["after"] = after
        try:
            response = self._endpoint.get(self._api_url + "/emails", params, timeout=left)
        except requests.Timeout:
            return Lookup(error=f"lookup_{TIMEOUT}")
        except requests.RequestException:
            return Lookup(error=f"lookup_{CONNECTION_ERROR}")
        body = json_object(response.content)
        if response.status_code != 200:
            name = body.get("name") if isinstance(body.get("name"), str) else None
            return Lookup(
                error=f"lookup_{name or f'http_{response.status_code}'}",
                http_status=response.status_code,
                # A key that may only send, a wrong key or URL: asking again cannot help.
                permanent=response.status_code in (401, 403, 404, 405),
                fix=_lookup_fix(response.status_code, name),
            )
        data = body.get("data")
        emails = (
            [email for email in data if isinstance(email, dict)] if isinstance(data, list) else []
        )
        return emails, body.get("has_more") is True

    def close(self) -> None:
        self._endpoint.close()
        self._batch_endpoint.close()


def _lookup_fix(status: int, name: str | None) -> str | None:
    """The setting to fix when the list refuses a key or URL that cannot send either;
    None for a key that may only send: it sends, it just cannot read the list."""
    if name == SENDING_ONLY_KEY:
        return None
    if status in (401, 403):
        return API_KEY_FIX
    if status in (404, 405):
        return API_URL_FIX
    return None


def _recipients(value: Any) -> frozenset[str]:
    if not isinstance(value, list):
        return frozenset()
    return frozenset(str(address).strip().lower() for address in value)


def _matches(email: dict[str, Any], wanted: tuple[frozenset[str], str], since: datetime) -> bool:
    recipients, subject = wanted
    created = _created_at(email)
    return (
        bool(email.get("id"))
        and _recipients(email.get("to")) == recipients
        and str(email.get("subject", "")) == subject
        and created is not None
        and created >= since
    )


def _created_at(email: dict[str, Any]) -> datetime | None:
    """Resend's ``created_at`` (``2023-04-03T22:13:42.674981+00:00``, or with a space)."""
    raw = email.get("created_at")
    if not isinstance(raw, str):
        return None
    try:
        when = datetime.fromisoformat(raw.replace(" ", "T"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None
