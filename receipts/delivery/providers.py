"""Email providers behind one small interface: Resend, and a local file sink.

A provider takes the message key and the frozen payload exactly as stored
(JSON bytes) and returns a :class:`ProviderAnswer`: the facts of the answer,
as Resend gives them (the HTTP status, the error name of Resend's body
``{"statusCode", "name", "message"}``, the id of an accepted email, and the
rate-limit headers), or the name of the network failure when no answer came.
What each answer does to the row, the pace and the run is decided in one
place, ``receipts.delivery.decisions`` (docs/architecture.md, "What each
provider answer does"). Providers never touch the database.

The file sink answers in the same terms (200 with an id, 409
``invalid_idempotent_request``, 422 ``validation_error``), so one table
decides for both.
"""

from __future__ import annotations

import contextlib
import email.policy
import email.utils
import hashlib
import json
import math
import os
import re
import tempfile
import time
from dataclasses import dataclass, replace
from email.message import EmailMessage
from email.parser import BytesHeaderParser
from pathlib import Path
from typing import Any, Protocol

import requests
from requests.adapters import HTTPAdapter

# Resend's documented default rate limit: 5 requests per second per team
# (https://resend.com/docs/api-reference/rate-limit). RECEIPTS_SEND_RATE
# defaults to it for Resend; the local file sink has no limit.
RESEND_DEFAULT_RATE = 5.0

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
    api_key_refused: bool = False  # the error's message says the API key is invalid
    retry_after: float | None = None  # seconds the provider asked us to wait
    rate_limit_limit: int | None = None  # requests the provider allows per window
    rate_limit_remaining: int | None = None
    rate_limit_reset: float | None = None  # seconds until the provider's window resets

    @property
    def accepted(self) -> bool:
        """A 2xx carrying the email's id: the provider took the message."""
        status = self.http_status
        return status is not None and 200 <= status < 300 and bool(self.provider_id)


class Provider(Protocol):
    """Sends one frozen message; must be safe to call from several threads."""

    name: str
    default_rate: float  # requests per second when RECEIPTS_SEND_RATE is unset (0: no cap)

    def send(self, message_key: str, payload: bytes) -> ProviderAnswer: ...

    def close(self) -> None: ...


class ResendProvider:
    """``POST {api_url}/emails`` with the message key as ``Idempotency-Key``."""

    name = "resend"
    default_rate = RESEND_DEFAULT_RATE

    def __init__(
        self,
        *,
        api_url: str,
        api_key: str,
        connect_timeout: float,
        read_timeout: float,
        pool_size: int = 8,
    ) -> None:
        self._url = api_url.rstrip("/") + "/emails"
        self._timeout = (connect_timeout, read_timeout)
        self._session = requests.Session()
        adapter = HTTPAdapter(pool_connections=1, pool_maxsize=max(1, pool_size), max_retries=0)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        # As session auth (not a plain header) so requests skips its ~/.netrc
        # lookup on every send: about 4% of a worker's time at full speed.
        self._session.auth = _BearerToken(api_key)
        self._session.headers.update(
            {"Content-Type": "application/json", "User-Agent": "receipts-worker"}
        )

    def send(self, message_key: str, payload: bytes) -> ProviderAnswer:
        try:
            response = self._session.post(
                self._url,
                data=payload,
                headers={"Idempotency-Key": message_key},
                timeout=self._timeout,
                # A redirect means RESEND_API_URL is not Resend's API base: the
                # 3xx itself is the answer (a configuration error), and the API
                # key is never sent on to another address.
                allow_redirects=False,
            )
        except requests.Timeout:
            return ProviderAnswer(error=TIMEOUT)
        except requests.ConnectionError:
            return ProviderAnswer(error=CONNECTION_ERROR)
        except requests.RequestException as exc:
            return ProviderAnswer(error=type(exc).__name__)
        return classify_response(response.status_code, response.headers, response.content)

    def close(self) -> None:
        self._session.close()


class _BearerToken(requests.auth.AuthBase):
    def __init__(self, token: str) -> None:
        self._header = f"Bearer {token}"

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = self._header
        return request


def classify_response(status: int, headers: Any, body: bytes) -> ProviderAnswer:
    """The facts of one HTTP answer, read the way Resend writes them.

    The error name is the body's ``name`` when it is a short machine name
    (else ``http_<status>``); its free-text ``message`` is only looked at for
    the one thing the name does not say (a ``validation_error`` that means
    the API key is invalid) and is never kept. docs/architecture.md, "What
    each provider answer does", lists what each answer does.
    """
    document = _json_object(body)
    answer = ProviderAnswer(
        http_status=status,
        retry_after=_seconds(headers.get("Retry-After")),
        rate_limit_limit=_integer(headers.get("ratelimit-limit")),
        rate_limit_remaining=_integer(headers.get("ratelimit-remaining")),
        rate_limit_reset=_seconds(headers.get("ratelimit-reset")),
    )
    if 200 <= status < 300:
        provider_id = document.get("id")
        if isinstance(provider_id, str) and provider_id:
            return replace(answer, provider_id=provider_id)
        return replace(answer, error="no_provider_id")
    return replace(
        answer,
        error=_error_name(document, status),
        api_key_refused=_says_api_key_invalid(document.get("message")),
    )


def _says_api_key_invalid(message: Any) -> bool:
    """Resend's ``validation_error`` "API key is invalid" (400 on a malformed key)."""
    return isinstance(message, str) and "api key" in message.lower()


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        document = json.loads(body) if body else {}
    except (ValueError, UnicodeDecodeError):
        return {}
    return document if isinstance(document, dict) else {}


_ERROR_NAME = re.compile(r"^[a-z0-9_]{1,64}$")


def _error_name(document: dict[str, Any], status: int) -> str:
    """The provider's machine-readable error name; never its free-text message."""
    name = document.get("name")
    if isinstance(name, str) and _ERROR_NAME.match(name):
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


class FileSinkProvider:
    """Writes one RFC 5322 ``.eml`` file per message key, for development.

    Idempotent like the real provider: a second send of the same key writes
    nothing and returns the same id; the same key with a different payload is
    rejected as ``invalid_idempotent_request``. Files appear atomically.
    """

    name = "file"
    default_rate = 0.0

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def send(self, message_key: str, payload: bytes) -> ProviderAnswer:
        digest = hashlib.sha256(payload).hexdigest()
        message_id = file_sink_id(message_key)
        target = self.path_for(message_key)
        existing = _stored_payload_digest(target)
        if existing is None:
            try:
                message = build_email(message_key, payload, message_id, digest)
            except ValueError:
                return ProviderAnswer(http_status=422, error="validation_error")
            if _create_atomically(target, message.as_bytes(policy=email.policy.SMTP)):
                return ProviderAnswer(http_status=200, provider_id=message_id)
            existing = _stored_payload_digest(target)
        if existing != digest:
            return ProviderAnswer(http_status=409, error=KEY_REUSED_WITH_OTHER_BODY)
        return ProviderAnswer(http_status=200, provider_id=message_id)

    def path_for(self, message_key: str) -> Path:
        """A safe file name: readable key characters plus a hash against collisions."""
        readable = re.sub(r"[^A-Za-z0-9_-]", "_", message_key)[:120]
        short = hashlib.sha256(message_key.encode("utf-8")).hexdigest()[:12]
        return self.directory / f"{readable}-{short}.eml"

    def close(self) -> None:
        pass


def file_sink_id(message_key: str) -> str:
    return "file_" + hashlib.sha256(message_key.encode("utf-8")).hexdigest()[:32]


PAYLOAD_DIGEST_HEADER = "X-Receipts-Payload-SHA256"


def build_email(message_key: str, payload: bytes, message_id: str, digest: str) -> EmailMessage:
    """The stored Resend payload as an RFC 5322 message; ValueError if unusable."""
    document = _json_object(payload)
    recipients = document.get("to")
    if not isinstance(recipients, list) or not all(isinstance(to, str) for to in recipients):
        raise ValueError("payload has no 'to' list")
    message = EmailMessage()
    message["From"] = str(document.get("from", ""))
    message["To"] = ", ".join(recipients)
    if document.get("reply_to"):
        message["Reply-To"] = str(document["reply_to"])
    message["Subject"] = str(document.get("subject", ""))
    message["Date"] = email.utils.formatdate(localtime=False)
    message["Message-ID"] = f"<{message_id}@receipts.local>"
    message["X-Receipts-Message-Key"] = message_key
    message[PAYLOAD_DIGEST_HEADER] = digest
    message.set_content(str(document.get("text", "")))
    if document.get("html"):
        message.add_alternative(str(document["html"]), subtype="html")
    return message


def _stored_payload_digest(path: Path) -> str | None:
    """The payload digest of the message already written for a key, if any."""
    try:
        with path.open("rb") as stored:
            headers = BytesHeaderParser(policy=email.policy.default).parse(stored)
    except FileNotFoundError:
        return None
    return str(headers.get(PAYLOAD_DIGEST_HEADER, "")).strip()


def _create_atomically(target: Path, content: bytes) -> bool:
    """Write ``target`` only if absent; False when another writer got there first."""
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".eml")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temporary, target)  # fails if the file exists: no overwrite race
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
