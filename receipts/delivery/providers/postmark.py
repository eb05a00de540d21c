"""Postmark: ``POST /email``, each message tagged with its key, found again by search.

Postmark has no idempotency key. What it has: every message may carry
``Metadata`` (name/value pairs; names up to 20 characters, values up to 80,
as Postmark's "Invalid metadata content" error says and its "Custom metadata
FAQ" describes), and the outbound message search filters by one metadata
field (``GET /messages/outbound?count=…&offset=…&metadata_<name>=<value>``;
Postmark API reference, "Messages API: Outbound message search"). So each
send carries ``{"message_key": KEY}`` (a key longer than 80 characters goes
as ``{"message_key_sha256": hex}``), and before any retry of a send whose
outcome is unknown the worker asks the search (:meth:`PostmarkProvider.
look_up`): found, the receipt is sent with that ``MessageID`` and nothing is
sent again. Postmark keeps messages, their metadata included, for its
activity retention (45 days by default, 7 to 365 with its Retention Add-on:
"How long are Inbound and Outbound messages stored in activity?"): the
search can answer only inside that window, which is therefore the retry
cutoff. An accepted message is not searchable at once; a retry waits
``RECEIPTS_POSTMARK_SEARCH_LAG_SECONDS`` after the ambiguous attempt.

The frozen payload (Resend's shape) is turned into Postmark's fields the
same way on every attempt: the same bytes for the same payload.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime
from typing import Any

import requests

from receipts.delivery.answers import (
    CONNECTION_ERROR,
    TIMEOUT,
    ProviderAnswer,
    header_seconds,
    json_object,
    one_line,
)
from receipts.delivery.providers.base import Guarantee, Lookup, Protection
from receipts.delivery.providers.http_transport import JsonEndpoint
from receipts.delivery.rules.postmark import (
    TOKEN_ERROR_CODE,
    TOKEN_FIX,
    error_name,
    postmark_table,
)

# Postmark documents no per-second limit for sending; it answers 429 when hit.
POSTMARK_DEFAULT_RATE = 0.0
METADATA_NAME = "message_key"
METADATA_HASH_NAME = "message_key_sha256"
METADATA_VALUE_LIMIT = 80
SEARCH_COUNT = 50


def metadata_for(message_key: str) -> dict[str, str]:
    """The ``Metadata`` every send of ``message_key`` carries (and the search asks for)."""
    if len(message_key) <= METADATA_VALUE_LIMIT:
        return {METADATA_NAME: message_key}
    return {METADATA_HASH_NAME: hashlib.sha256(message_key.encode("utf-8")).hexdigest()}


def postmark_body(message_key: str, payload: bytes, message_stream: str) -> bytes:
    """The frozen payload as Postmark's ``POST /email`` body."""
    document = json_object(payload)
    recipients = document.get("to")
    to = ", ".join(str(r) for r in recipients) if isinstance(recipients, list) else ""
    body: dict[str, Any] = {
        "From": str(document.get("from", "")),
        "To": to,
        "Subject": str(document.get("subject", "")),
        "TextBody": str(document.get("text", "")),
        "MessageStream": message_stream,
        "Metadata": metadata_for(message_key),
        "Headers": [{"Name": "Auto-Submitted", "Value": "auto-generated"}],
    }
    if document.get("html"):
        body["HtmlBody"] = str(document["html"])
    if document.get("reply_to"):
        body["ReplyTo"] = str(document["reply_to"])
    attachments = document.get("attachments")
    if isinstance(attachments, list) and attachments:
        body["Attachments"] = [_attachment(item) for item in attachments if isinstance(item, dict)]
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _attachment(item: dict[str, Any]) -> dict[str, str]:
    """Resend's ``filename``/``content``/``content_type`` as Postmark's Name/Content/ContentType."""
    name = str(item.get("filename", "attachment"))
    kind = item.get("content_type")
    if not isinstance(kind, str) or not kind:
        kind = "application/pdf" if name.lower().endswith(".pdf") else "application/octet-stream"
    return {"Name": name, "Content": str(item.get("content", "")), "ContentType": kind}


def classify_postmark(status: int, headers: Any, body: bytes) -> ProviderAnswer:
    """The facts of one Postmark answer: status, ErrorCode by our name, MessageID."""
    document = json_object(body)
    code = document.get("ErrorCode")
    retry_after = header_seconds(headers.get("Retry-After"))
    message_id = document.get("MessageID")
    failed = isinstance(code, int) and code != 0
    if 200 <= status < 300 and not failed:
        accepted = isinstance(message_id, str) and bool(message_id)
        return ProviderAnswer(
            http_status=status,
            provider_id=message_id if accepted else None,
            error=None if accepted else "no_provider_id",
            retry_after=retry_after,
        )
    return ProviderAnswer(
        http_status=status,
        error=error_name(code) if isinstance(code, int) and failed else f"http_{status}",
        message=one_line(document.get("Message")),
        retry_after=retry_after,
    )


class PostmarkProvider:
    """``POST {api_url}/email`` with ``X-Postmark-Server-Token``; see the module docstring."""

    name = "postmark"
    default_rate = POSTMARK_DEFAULT_RATE

    def __init__(
        self,
        *,
        api_url: str,
        server_token: str,
        message_stream: str,
        retention_days: float,
        search_lag_seconds: float,
        connect_timeout: float,
        read_timeout: float,
        pool_size: int = 8,
    ) -> None:
        self._api_url = api_url.rstrip("/")
        self._stream = message_stream
        self._endpoint = JsonEndpoint(
            url=self._api_url + "/email",
            headers={"Accept": "application/json", "X-Postmark-Server-Token": server_token},
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            pool_size=pool_size,
            setting="POSTMARK_API_URL",
        )
        self.guarantee = Guarantee(
            protection=Protection.SEARCH,
            window_hours=retention_days * 24,
            can_look_up=True,
            lookup_lag_seconds=search_lag_seconds,
        )
        self.answers = postmark_table(search_lag_seconds)

    def send(self, message_key: str, payload: bytes) -> ProviderAnswer:
        try:
            response = self._endpoint.post(postmark_body(message_key, payload, self._stream))
        except requests.Timeout:
            return ProviderAnswer(error=TIMEOUT)
        except requests.ConnectionError:
            return ProviderAnswer(error=CONNECTION_ERROR)
        except requests.RequestException as exc:
            return ProviderAnswer(error=type(exc).__name__)
        return classify_postmark(response.status_code, response.headers, response.content)

    def look_up(
        self, message_key: str, payload: bytes, *, since: datetime, deadline: float
    ) -> Lookup:
        """The ``MessageID`` of a message Postmark accepted with this key's metadata."""
        [(name, value)] = metadata_for(message_key).items()
        searched = f"Postmark's outbound search for metadata {name}"
        left = deadline - time.monotonic()
        if left <= 0.5:
            return Lookup(error="lookup_out_of_time", searched=searched)
        params: dict[str, str | int] = {
            "count": SEARCH_COUNT,
            "offset": 0,
            # Without it Postmark searches the default "outbound" stream only.
            "messagestream": self._stream,
            f"metadata_{name}": value,
        }
        try:
            response = self._endpoint.get(self._api_url + "/messages/outbound", params, left)
        except requests.Timeout:
            return Lookup(error=f"lookup_{TIMEOUT}", searched=searched)
        except requests.RequestException:
            return Lookup(error=f"lookup_{CONNECTION_ERROR}", searched=searched)
        document = json_object(response.content)
        if response.status_code != 200:
            code = document.get("ErrorCode")
            named = (
                error_name(code)
                if isinstance(code, int) and code != 0
                else f"http_{response.status_code}"
            )
            # The token the sends use too: no receipt can be asked about until it is fixed.
            bad_token = response.status_code == 401 or code == TOKEN_ERROR_CODE
            return Lookup(
                error=f"lookup_{named}",
                http_status=response.status_code,
                permanent=bad_token,
                fix=TOKEN_FIX if bad_token else None,
                searched=searched,
            )
        for message in document.get("Messages") or []:
            if not isinstance(message, dict):
                continue
            metadata = message.get("Metadata")
            found = message.get("MessageID")
            if isinstance(metadata, dict) and metadata.get(name) == value and found:
                return Lookup(provider_id=str(found), http_status=200, searched=searched)
        return Lookup(http_status=200, searched=searched)

    def close(self) -> None:
        self._endpoint.close()
