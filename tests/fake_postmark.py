"""A real local HTTP server that answers like Postmark's API, built from its documentation.

Use it in-thread (``with running_fake_postmark() as fake: fake.url``) or as a
process of its own (``python -m tests.fake_postmark --port 0``; it prints
``listening on http://127.0.0.1:PORT``).

Rules it keeps, like Postmark (Postmark API reference: "Overview", "Email
API", "Messages API"; "Custom metadata FAQ"):

* ``X-Postmark-Server-Token`` must match the token when one is set: else 401
  ``{"ErrorCode": 10, "Message": "…"}``.
* ``POST /email`` needs ``From``, ``To`` and ``Subject`` (else 422 ErrorCode
  300); a ``Metadata`` name over 20 characters or value over 80 is 422
  ErrorCode 300 "Invalid metadata content…"; a recipient marked inactive is
  422 ErrorCode 406. Accepted: 200 ``{"To", "SubmittedAt", "MessageID",
  "ErrorCode": 0, "Message": "OK"}``. No idempotency: every accepted request
  is one more delivery.
* ``GET /messages/outbound?count=&offset=`` (both required, count at most
  500, count + offset at most 10,000) lists accepted messages newest first,
  filtered by ``recipient``, ``subject`` and one ``metadata_<name>=<value>``,
  in one message stream (``messagestream``, default ``outbound``);
  a message appears only ``search_lag`` seconds (of the fake's clock) after
  it was accepted, as a search index that lags behind.
* With a rate limit (``rate_limit`` sends per ``rate_window`` seconds), a send
  over it is 429 ``{"ErrorCode": 429, "Message": "Rate Limit Exceeded"}``.
* ``GET /server`` (the server the token belongs to) and ``GET
  /message-streams/<id>`` (422 ErrorCode 1226 for an unknown stream) for
  ``receipts doctor``.

Control API: ``GET /_stats`` (``requests``, ``deliveries``,
``deliveries_by_key`` — by the ``message_key`` metadata —, ``searches``,
``in_flight``, ``rate_limited``), ``GET /_deliveries`` (``{"id", "key",
"body"}`` in order), ``POST /_script`` ``{"answers": [ANSWER…]}`` for the next
sends (``status``, ``error_code``, ``message``, ``delay`` before answering,
``hold``: accept, then wait before answering — the answer comes late or never,
``no_id``) or ``{"searches": [{"status", "error_code"}…]}`` for the next
searches, ``POST /_config`` (``token``, ``search_lag``, ``rate_limit``,
``rate_window``, ``inactive``: addresses, ``streams``), ``POST /_clock``
``{"advance": s}``, ``POST /_reset``.
"""

from __future__ import annotations

import argparse
import collections
import json
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests

Reply = tuple[int, dict[str, str], bytes]

# Postmark's messages for the errors it gives here.
BAD_TOKEN = (
    "The Server Token you provided in the X-Postmark-Server-Token request header was invalid."
)
BAD_METADATA = (
    "Invalid metadata content. Field names are limited to 20 characters and field values "
    "are limited to 80 characters in length."
)
INACTIVE = "You tried to send to recipient(s) that have been marked as inactive."
MISSING_FIELDS = "Invalid email request: 'From', 'To' and 'Subject' are required."


@dataclass
class _Answer:
    status: int = 200
    error_code: int | None = None
    message: str | None = None
    delay: float = 0.0
    hold: float = 0.0
    no_id: bool = False


@dataclass
class _Accepted:
    message_id: str
    body: dict[str, Any]
    accepted_at: float  # the fake's clock


@dataclass
class FakePostmark:
    token: str | None = None
    search_lag: float = 0.0
    rate_limit: int | None = None
    rate_window: float = 1.0
    inactive: set[str] = field(default_factory=set)
    streams: set[str] = field(default_factory=lambda: {"outbound"})

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.accepted: list[_Accepted] = []
        self.answers: list[_Answer] = []
        self.search_answers: list[dict[str, Any]] = []
        self.requests = 0
        self.searches = 0
        self.in_flight = 0
        self.rate_limited = 0
        self.clock_offset = 0.0
        self.admitted: collections.deque[float] = collections.deque()

    def now(self) -> float:
        return time.time() + self.clock_offset

    def stats(self) -> dict[str, Any]:
        with self.lock:
            by_key = Counter(_key_of(item.body) for item in self.accepted)
            return {
                "requests": self.requests,
                "deliveries": len(self.accepted),
                "deliveries_by_key": dict(by_key),
                "searches": self.searches,
                "in_flight": self.in_flight,
                "rate_limited": self.rate_limited,
            }

    def deliveries(self) -> list[dict[str, str]]:
        with self.lock:
            return [
                {"id": item.message_id, "key": _key_of(item.body), "body": json.dumps(item.body)}
                for item in self.accepted
            ]

    def send(self, token: str | None, raw: bytes) -> Reply:
        refused = self._check_token(token)
        if refused is not None:
            return refused
        with self.lock:
            self.requests += 1
            if not self._admit():
                self.rate_limited += 1
                return _error(429, 429, "Rate Limit Exceeded")
            answer = self.answers.pop(0) if self.answers else _Answer()
            self.in_flight += 1
        try:
            time.sleep(answer.delay)
            return self._answer(raw, answer)
        finally:
            with self.lock:
                self.in_flight -= 1

    def _admit(self) -> bool:
        if self.rate_limit is None:
            return True
        now = time.monotonic()
        while self.admitted and self.admitted[0] <= now - self.rate_window:
            self.admitted.popleft()
        if len(self.admitted) >= self.rate_limit:
            return False
        self.admitted.append(now)
        return True

    def _answer(self, raw: bytes, answer: _Answer) -> Reply:
        if answer.status != 200 or answer.error_code:
            return _error(answer.status, answer.error_code or 0, answer.message or "Scripted.")
        try:
            body = json.loads(raw)
        except ValueError:
            return _error(422, 402, "Received invalid JSON input.")
        problem = _invalid(body, self.inactive)
        if problem is not None:
            return problem
        if answer.no_id:
            return 200, {}, json.dumps({"ErrorCode": 0, "Message": "OK"}).encode()
        message_id = str(uuid.uuid4())
        with self.lock:
            self.accepted.append(_Accepted(message_id, body, self.now()))
        time.sleep(answer.hold)
        submitted = datetime.fromtimestamp(self.now(), UTC).isoformat()
        reply = {"To": body["To"], "SubmittedAt": submitted, "MessageID": message_id,
                 "ErrorCode": 0, "Message": "OK"}  # fmt: skip
        return 200, {}, json.dumps(reply).encode()

    def search(self, token: str | None, query: dict[str, list[str]]) -> Reply:
        refused = self._check_token(token)
        if refused is not None:
            return refused
        with self.lock:
            self.searches += 1
            scripted = self.search_answers.pop(0) if self.search_answers else None
            visible = [
                item for item in self.accepted if item.accepted_at + self.search_lag <= self.now()
            ]
        if scripted is not None:
            return _error(
                int(scripted.get("status", 500)), int(scripted.get("error_code", 0)), "Scripted."
            )
        try:
            count, offset = int(query["count"][0]), int(query["offset"][0])
        except (KeyError, ValueError):
            return _error(422, 300, "The 'count' and 'offset' parameters are required.")
        if not 0 < count <= 500 or offset < 0 or count + offset > 10000:
            return _error(422, 300, "Invalid 'count' or 'offset'.")
        matches = [item for item in reversed(visible) if _matches(item.body, query)]
        listed = [_listed(item) for item in matches[offset : offset + count]]
        return 200, {}, json.dumps({"TotalCount": len(matches), "Messages": listed}).encode()

    def _check_token(self, token: str | None) -> Reply | None:
        if self.token is not None and token != self.token:
            return _error(401, 10, BAD_TOKEN)
        return None


def _key_of(body: dict[str, Any]) -> str:
    metadata = body.get("Metadata") or {}
    return str(metadata.get("message_key") or metadata.get("message_key_sha256") or "")


def _invalid(body: Any, inactive: set[str]) -> Reply | None:
    if not isinstance(body, dict) or not all(body.get(name) for name in ("From", "To", "Subject")):
        return _error(422, 300, MISSING_FIELDS)
    metadata = body.get("Metadata") or {}
    if len(metadata) > 10 or any(len(k) > 20 or len(str(v)) > 80 for k, v in metadata.items()):
        return _error(422, 300, BAD_METADATA)
    recipients = [address.strip().lower() for address in str(body["To"]).split(",")]
    if any(address in inactive for address in recipients):
        return _error(422, 406, INACTIVE)
    return None


def _matches(body: dict[str, Any], query: dict[str, list[str]]) -> bool:
    # As Postmark: a search without ``messagestream`` looks in ``outbound`` only.
    stream = query.get("messagestream", ["outbound"])[0]
    if body.get("MessageStream", "outbound") != stream:
        return False
    for name, values in query.items():
        value = values[0]
        if name.startswith("metadata_"):
            if (body.get("Metadata") or {}).get(name.removeprefix("metadata_")) != value:
                return False
        elif (name == "recipient" and value.lower() not in str(body.get("To", "")).lower()) or (
            name == "subject" and value != body.get("Subject")
        ):
            return False
    return True


def _listed(item: _Accepted) -> dict[str, Any]:
    body = item.body
    recipients = [address.strip() for address in str(body.get("To", "")).split(",")]
    return {
        "MessageID": item.message_id,
        "To": [{"Email": address, "Name": None} for address in recipients],
        "Cc": [], "Bcc": [], "Recipients": recipients,
        "ReceivedAt": datetime.fromtimestamp(item.accepted_at, UTC).isoformat(),
        "From": body.get("From"), "Subject": body.get("Subject"),
        "Attachments": [item.get("Name") for item in body.get("Attachments") or []],
        "Status": "Sent", "Metadata": body.get("Metadata") or {},
        "MessageStream": body.get("MessageStream", "outbound"),
    }  # fmt: skip


def _error(status: int, code: int, message: str) -> Reply:
    return status, {}, json.dumps({"ErrorCode": code, "Message": message}).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _Server

    def do_GET(self) -> None:
        fake = self.server.fake
        parts = urlsplit(self.path)
        token = self.headers.get("X-Postmark-Server-Token")
        if parts.path == "/_stats":
            self._reply(200, {}, json.dumps(fake.stats()).encode())
        elif parts.path == "/_deliveries":
            self._reply(200, {}, json.dumps(fake.deliveries()).encode())
        elif parts.path == "/messages/outbound":
            self._reply(*fake.search(token, parse_qs(parts.query)))
        elif parts.path == "/server":
            refused = fake._check_token(token)
            self._reply(*(refused or (200, {}, json.dumps({"ID": 1, "Name": "Receipts"}).encode())))
        elif parts.path.startswith("/message-streams/"):
            self._reply(*self._stream(token, parts.path.removeprefix("/message-streams/")))
        else:
            self._reply(404, {}, b"")

    def _stream(self, token: str | None, stream: str) -> Reply:
        fake = self.server.fake
        refused = fake._check_token(token)
        if refused is not None:
            return refused
        if stream not in fake.streams:
            return _error(422, 1226, "The message stream for the provided 'ID' was not found.")
        found = {"ID": stream, "ServerID": 1, "Name": stream, "MessageStreamType": "Transactional"}
        return 200, {}, json.dumps(found).encode()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        fake = self.server.fake
        if self.path == "/email":
            self._reply(*fake.send(self.headers.get("X-Postmark-Server-Token"), body))
            return
        command = json.loads(body or b"{}")
        with fake.lock:
            if self.path == "/_script":
                fake.answers.extend(_Answer(**answer) for answer in command.get("answers", []))
                fake.search_answers.extend(command.get("searches", []))
            elif self.path == "/_config":
                _configure(fake, command)
            elif self.path == "/_clock":
                fake.clock_offset += float(command.get("advance", 0))
            elif self.path == "/_reset":
                fake.reset()
            else:
                self._reply(404, {}, b"")
                return
        self._reply(200, {}, b"{}")

    def _reply(self, status: int, headers: dict[str, str], body: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _configure(fake: FakePostmark, command: dict[str, Any]) -> None:
    if "token" in command:
        fake.token = command["token"]
    if "search_lag" in command:
        fake.search_lag = float(command["search_lag"])
    if "rate_limit" in command:
        fake.rate_limit = None if command["rate_limit"] is None else int(command["rate_limit"])
    if "rate_window" in command:
        fake.rate_window = float(command["rate_window"])
    if "inactive" in command:
        fake.inactive = {str(address).lower() for address in command["inactive"]}
    if "streams" in command:
        fake.streams = set(command["streams"])


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, port: int, fake: FakePostmark) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.fake = fake

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class FakePostmarkClient:
    """The control API over HTTP."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = requests.get(f"{self.url}/_stats", timeout=5).json()
        return result

    def deliveries(self) -> list[dict[str, str]]:
        result: list[dict[str, str]] = requests.get(f"{self.url}/_deliveries", timeout=5).json()
        return result

    def script(
        self, *answers: dict[str, Any], searches: list[dict[str, Any]] | None = None
    ) -> None:
        self._post("/_script", {"answers": list(answers), "searches": searches or []})

    def configure(self, **settings: Any) -> None:
        self._post("/_config", settings)

    def advance_clock(self, seconds: float) -> None:
        self._post("/_clock", {"advance": seconds})

    def _post(self, path: str, document: dict[str, Any]) -> None:
        requests.post(f"{self.url}{path}", json=document, timeout=5).raise_for_status()


@contextmanager
def running_fake_postmark(**options: Any) -> Iterator[FakePostmarkClient]:
    """A fake Postmark on a free port, served from a thread of this process."""
    server = _Server(0, FakePostmark(**options))
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield FakePostmarkClient(server.url)
    finally:
        server.shutdown()
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A fake Postmark API for tests.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default=None)
    parser.add_argument("--search-lag", type=float, default=0.0)
    args = parser.parse_args(argv)
    server = _Server(args.port, FakePostmark(token=args.token, search_lag=args.search_lag))
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"listening on {server.url}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
