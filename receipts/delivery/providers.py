"""Email providers behind one small interface: Resend, and a local file sink.

A provider takes the message key and the frozen payload exactly as stored
(JSON bytes) and returns a :class:`ProviderAnswer` that already says what the
outbox must do with the row:

* ``accepted``: the provider took the message and gave its id;
* ``retry``: nothing is known to have gone wrong with the message itself
  (timeout, connection error, 5xx, 429, a request with the same key still in
  progress, a 2xx without an id); the same key makes a later retry safe;
* ``rejected``: retrying cannot help (the key was reused with another body,
  an invalid recipient...); a person must look at it;
* ``unauthorized``: 401/403, the provider refuses our credentials or sender;
  a configuration problem, not a problem of this message.

Only ``receipts.delivery.decisions`` says what happens next; providers never
touch the database.
"""

from __future__ import annotations

import contextlib
import email.policy
import email.utils
import hashlib
import json
import os
import re
import tempfile
import time
from dataclasses import dataclass, replace
from email.message import EmailMessage
from email.parser import BytesHeaderParser
from pathlib import Path
from typing import Any, Literal, Protocol

import requests
from requests.adapters import HTTPAdapter

from receipts.addresses import parse_mailbox

AnswerKind = Literal["accepted", "retry", "rejected", "unauthorized"]

# 409 answers Resend gives for a reused Idempotency-Key.
KEY_IN_PROGRESS = "concurrent_idempotent_requests"
KEY_REUSED_WITH_OTHER_BODY = "invalid_idempotent_request"


@dataclass(frozen=True, kw_only=True)
class ProviderAnswer:
    """What one send attempt came to, in the terms the outbox needs."""

    kind: AnswerKind
    http_status: int | None = None
    provider_id: str | None = None
    error: str | None = None  # the provider's error name, or ours for network failures
    message: str | None = None  # the provider's error message, one line (for operators)
    retry_after: float | None = None  # seconds the provider asked us to wait
    rate_limit_reset: float | None = None  # seconds until the provider's window resets
    rate_limit_remaining: int | None = None


class Provider(Protocol):
    """Sends one frozen message; must be safe to call from several threads."""

    name: str

    def send(self, message_key: str, payload: bytes) -> ProviderAnswer: ...

    def close(self) -> None: ...


class ResendProvider:
    """``POST {api_url}/emails`` with the message key as ``Idempotency-Key``."""

    name = "resend"

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
            )
        except requests.Timeout:
            return ProviderAnswer(kind="retry", error="timeout")
        except requests.ConnectionError:
            return ProviderAnswer(kind="retry", error="connection_error")
        except requests.RequestException as exc:
            return ProviderAnswer(kind="retry", error=type(exc).__name__)
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
    """Map one HTTP answer onto the outcome table.

    docs/architecture.md, "What each provider answer does", lists every case;
    ``receipts.delivery.decisions`` says what each kind does to the row.
    """
    document = _json_object(body)
    answer = ProviderAnswer(
        kind="retry",
        http_status=status,
        retry_after=_seconds(headers.get("Retry-After")),
        rate_limit_reset=_seconds(headers.get("ratelimit-reset")),
        rate_limit_remaining=_integer(headers.get("ratelimit-remaining")),
    )
    if 200 <= status < 300:
        provider_id = document.get("id")
        if isinstance(provider_id, str) and provider_id:
            return replace(answer, kind="accepted", provider_id=provider_id)
        return replace(answer, error="no_provider_id")
    error = _error_name(document, status)
    answer = replace(answer, message=_error_message(document))
    if status in (401, 403):
        return replace(answer, kind="unauthorized", error=error)
    if (status == 409 and error == KEY_IN_PROGRESS) or status in (408, 429) or status >= 500:
        return replace(answer, error=error)
    return replace(answer, kind="rejected", error=error)


def _json_object(body: bytes) -> dict[str, Any]:
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


_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def _error_message(document: dict[str, Any]) -> str | None:
    """The provider's ``message`` for a person to read: one line, at most 300 characters.

    Kept with the attempt, never logged: Resend names the refused address in it.
    """
    message = document.get("message")
    if not isinstance(message, str):
        return None
    return _UNPRINTABLE.sub(" ", message).strip()[:300] or None


def _seconds(value: str | None) -> float | None:
    """A delay in seconds from a header (delta-seconds or an HTTP date)."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _integer(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


class FileSinkProvider:
    """Writes one RFC 5322 ``.eml`` file per message key, for development.

    Idempotent like the real provider: a second send of the same key writes
    nothing and returns the same id; the same key with a different payload is
    rejected as ``invalid_idempotent_request``. Files appear atomically.
    """

    name = "file"

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
                return ProviderAnswer(kind="rejected", error="validation_error", http_status=None)
            if _create_atomically(target, message.as_bytes(policy=email.policy.SMTP)):
                return ProviderAnswer(kind="accepted", provider_id=message_id)
            existing = _stored_payload_digest(target)
        if existing != digest:
            return ProviderAnswer(kind="rejected", error=KEY_REUSED_WITH_OTHER_BODY)
        return ProviderAnswer(kind="accepted", provider_id=message_id)

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
    """The stored Resend payload as an RFC 5322 message; ValueError if unusable.

    Addresses are parsed by ``receipts.addresses`` and written as header
    objects, never joined as text: one stored recipient is one written
    recipient, or the message is refused (AddressError is a ValueError).
    """
    document = _json_object(payload)
    recipients = document.get("to")
    if (
        not isinstance(recipients, list)
        or not recipients
        or not all(isinstance(to, str) for to in recipients)
    ):
        raise ValueError("payload has no 'to' list")
    message = EmailMessage()
    message["From"] = parse_mailbox(str(document.get("from", "")))
    message["To"] = tuple(parse_mailbox(to) for to in recipients)
    if document.get("reply_to"):
        message["Reply-To"] = parse_mailbox(str(document["reply_to"]))
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
