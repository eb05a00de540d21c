"""Email providers behind one small interface: Resend, and a local file sink.

A provider takes the message key and the frozen payload exactly as stored
(JSON bytes) and returns a :class:`ProviderAnswer`: the facts of the answer
as Resend gives them (status, error name, the id of an accepted email, the
rate-limit headers), or the name of the network failure when no answer came.
What each answer does is decided in one place, ``receipts.delivery.decisions``;
the file sink answers in the same terms (200 with an id, 409
``invalid_idempotent_request``, 422 ``validation_error``). Providers never
touch the database.
"""

from __future__ import annotations

import contextlib
import email.policy
import email.utils
import hashlib
import os
import re
import tempfile
import threading
from email.message import EmailMessage
from email.parser import BytesHeaderParser
from pathlib import Path
from typing import Any, Protocol

import requests
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from requests.utils import check_header_validity

from receipts.addresses import parse_mailbox
from receipts.config import ConfigError
from receipts.delivery.answers import (
    CONNECTION_ERROR,
    KEY_REUSED_WITH_OTHER_BODY,
    TIMEOUT,
    ProviderAnswer,
    classify_response,
)
from receipts.delivery.answers import json_object as _json_object

# Resend's documented default rate limit: 5 requests per second per team
# (https://resend.com/docs/api-reference/rate-limit). RECEIPTS_SEND_RATE
# defaults to it for Resend; the local file sink has no limit.
RESEND_DEFAULT_RATE = 5.0


class Provider(Protocol):
    """Sends one frozen message; must be safe to call from several threads."""

    name: str
    default_rate: float  # requests per second when RECEIPTS_SEND_RATE is unset (0: no cap)

    def send(self, message_key: str, payload: bytes) -> ProviderAnswer: ...

    def close(self) -> None: ...


class ResendProvider:
    """``POST {api_url}/emails`` with the message key as ``Idempotency-Key``.

    Each send builds its :class:`requests.PreparedRequest` from headers made
    once and hands it to the session's transport adapter, skipping what
    ``Session.request`` and ``Session.send`` do on every call for features
    this request never uses: merging the environment's proxy and certificate
    settings, cookies, auth and hooks into the request and preparing it again,
    then storing the answer's cookies and looking for a redirect to follow.
    That was more than half of a send's CPU time at full speed. The
    environment (``HTTPS_PROXY``, ``NO_PROXY``, ``REQUESTS_CA_BUNDLE``) is
    read once, here. A redirect is never followed: the adapter does not
    follow them, so the 3xx itself is the answer (a configuration error), and
    the API key never travels to another address.
    """

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
        self._url = _prepared_url(api_url.rstrip("/") + "/emails")
        self._session = requests.Session()
        self._adapter = _OneEndpointAdapter(
            pool_connections=1, pool_maxsize=max(1, pool_size), max_retries=0
        )
        self._session.mount("http://", self._adapter)
        self._session.mount("https://", self._adapter)
        self._headers = CaseInsensitiveDict(
            {
                "User-Agent": "receipts-worker",
                "Accept-Encoding": "gzip, deflate",
                "Content-Type": "application/json",
                "Authorization": f"Bearer {api_key}",
            }
        )
        environment = self._session.merge_environment_settings(self._url, {}, None, None, None)
        self._send_options: dict[str, Any] = {
            "timeout": (connect_timeout, read_timeout),
            "stream": False,
            "proxies": environment["proxies"],
            "verify": environment["verify"],
            "cert": environment["cert"],
        }

    def send(self, message_key: str, payload: bytes) -> ProviderAnswer:
        try:
            request = self._request(message_key, payload)
            response = self._adapter.send(request, **self._send_options)
            body = response.content
        except requests.Timeout:
            return ProviderAnswer(error=TIMEOUT)
        except requests.ConnectionError:
            return ProviderAnswer(error=CONNECTION_ERROR)
        except requests.RequestException as exc:
            return ProviderAnswer(error=type(exc).__name__)
        return classify_response(response.status_code, response.headers, body)

    def _request(self, message_key: str, payload: bytes) -> requests.PreparedRequest:
        """The request ``Session.post`` would prepare (less the headers HTTP/1.1
        implies), with the stored bytes as its body."""
        check_header_validity(("Idempotency-Key", message_key))
        headers = self._headers.copy()
        headers["Idempotency-Key"] = message_key
        headers["Content-Length"] = str(len(payload))
        request = requests.PreparedRequest()
        request.method = "POST"
        request.url = self._url
        request.headers = headers
        request.body = payload
        return request

    def close(self) -> None:
        self._session.close()


class _OneEndpointAdapter(HTTPAdapter):
    """requests' adapter for a provider that posts to one URL with proxies and
    certificate settings fixed when it is made (``ResendProvider._send_options``):
    the connection pool, its certificate settings and the request target are
    worked out on the first send to a URL and kept, instead of parsing the URL,
    selecting a proxy, looking the pool up and checking the CA bundle on disk on
    every send."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._pools: dict[str, Any] = {}
        self._targets: dict[str, str] = {}
        self._lock = threading.Lock()

    def get_connection_with_tls_context(
        self, request: requests.PreparedRequest, verify: Any, proxies: Any = None, cert: Any = None
    ) -> Any:
        url = request.url or ""
        pool = self._pools.get(url)
        if pool is None:
            with self._lock:
                pool = super().get_connection_with_tls_context(request, verify, proxies, cert)
                super().cert_verify(pool, url, verify, cert)  # type: ignore[no-untyped-call]
                self._pools[url] = pool
        return pool

    def cert_verify(self, conn: Any, url: str, verify: Any, cert: Any) -> None:
        """Done once, when the pool was found (its settings stay on the pool)."""

    def request_url(self, request: requests.PreparedRequest, proxies: Any) -> str:
        url = request.url or ""
        target = self._targets.get(url)
        if target is None:
            target = self._targets[url] = super().request_url(request, proxies)
        return target

    def close(self) -> None:
        with self._lock:
            self._pools.clear()
            self._targets.clear()
        super().close()


def _prepared_url(url: str) -> str:
    """The URL as requests would send it (IDNA host, quoted path)."""
    request = requests.PreparedRequest()
    try:
        request.prepare_url(url, None)
    except requests.RequestException as exc:
        raise ConfigError("RESEND_API_URL", f"is not a usable URL ({type(exc).__name__})") from exc
    assert request.url is not None
    return request.url


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
