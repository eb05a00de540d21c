"""A real local HTTP server that answers ``POST /emails`` by Resend's rules.

Use it in-thread (``with running_fake_provider() as fake: fake.url``) or as a
process of its own::

    python -m tests.fake_provider --port 8025 [--latency 0.05] [--api-key KEY]
                                  [--no-idempotency] [--rate-limit 5] [--daily-quota N]

It prints ``listening on http://127.0.0.1:PORT`` once ready (``--port 0``
picks a free port) and runs until SIGTERM/SIGINT.

Rules it keeps, like Resend:

* ``Authorization: Bearer KEY`` must match ``--api-key`` when one is set
  (401 ``missing_api_key`` without a header, 403 ``invalid_api_key`` otherwise).
* An ``Idempotency-Key`` is remembered for 24 h of the server's clock after
  its first request. Same key + same body bytes replays the first answer and
  delivers nothing new; same key + another body answers 409
  ``invalid_idempotent_request``; a key whose first request is still being
  handled answers 409 ``concurrent_idempotent_requests``. Only successful
  answers are remembered: after a scripted error the key is free again.
* A body that is not a JSON object with ``from``, ``to`` and ``subject``
  answers 422 ``validation_error``.
* Every error is Resend's body ``{"statusCode", "name", "message"}``, with
  the message Resend's error page gives for that name (:data:`MESSAGES`), so
  any documented error can be scripted by name alone.
* With a rate limit (``rate_limit`` requests per ``rate_window`` seconds, a
  sliding window: no ``rate_window`` seconds ever hold more), every answer
  to ``POST /emails`` carries ``ratelimit-limit``, ``ratelimit-remaining``
  and ``ratelimit-reset`` (whole seconds, as the IETF draft Resend follows
  says), and a request over the limit answers 429 ``rate_limit_exceeded``
  with ``Retry-After``.
* With a daily or monthly quota, a new email past it answers 429
  ``daily_quota_exceeded`` / ``monthly_quota_exceeded`` (``Retry-After``
  only when ``quota_retry_after`` is set, since Resend documents none), and
  every answer carries ``x-resend-daily-quota`` / ``x-resend-monthly-quota``
  (emails used). The day is the UTC day of the fake's clock.
* ``POST /emails/batch`` takes a JSON array of 1 to 100 emails as Resend's
  "Send Batch Emails" does, one request against the rate limit, under one
  ``Idempotency-Key`` for the whole batch with the same rules as above (same
  key + same body replays the first answer; another body answers 409
  ``invalid_idempotent_request``). Each email is checked as ``POST /emails``
  checks one, and an attachment is refused (the batch endpoint takes none).
  With ``x-batch-validation: permissive`` the valid emails are delivered and
  the answer is ``{"data": [{"id"}…], "errors": [{"index", "message"}…]}``
  (``data`` in request order, ``errors`` naming each refused email's index);
  without it (strict) one invalid email answers 422 ``validation_error`` and
  nothing is delivered. Each delivery records the batch key as its ``key``,
  its ``index`` and its ``message_key`` tag.
* ``GET /emails?limit=&after=`` lists the emails sent, newest first, as
  Resend's "List Sent Emails" does (``{"object": "list", "has_more",
  "data": [{"id", "to", "from", "subject", "created_at", "last_event"}]}``,
  no tags; ``limit`` 1 to 100, default 20; ``after`` an id, excluded), with
  the same key check as ``POST /emails``; a key in ``restricted_keys`` (a
  sending-only key) is answered 401 ``restricted_api_key``. Any other path
  answers 404 ``not_found``, as Resend does for a wrong ``RESEND_API_URL``.

Control API (JSON in, JSON out):

* ``GET /_stats``: ``requests``, ``batch_requests``, ``deliveries``, ``replays``,
  ``requests_by_key``, ``deliveries_by_key``, ``in_flight``, ``max_in_flight``,
  ``rate_limited`` (429s for the rate) and ``quota_refused`` (429s for a quota).
* ``GET /_deliveries``: every delivery ``{"id", "key", "body"}`` in order.
* ``GET /_arrivals``: when each ``POST /emails`` arrived, in arrival order, as
  seconds on the server's monotonic clock (compare them with each other only).
* ``GET /_received``: ``[[wall_time, key], ...]``, when each ``POST /emails``
  arrived (``time.time()``, comparable with other processes' wall clocks) and
  its Idempotency-Key, in arrival order: for the payment-to-inbox benchmark.
* ``POST /_script``: ``{"answers": [ANSWER, ...]}`` queues answers for the
  next new requests (replays and 409s do not use them); with ``"replace":
  true`` they replace the answers still queued. ANSWER fields, all
  optional: ``status`` (default 200), ``name`` (error name), ``headers``
  (extra response headers, e.g. ``{"Retry-After": "2"}``), ``hold`` (a gate
  name: the request waits there, accepted but nothing delivered, until the
  gate is released), ``hold_answer`` (a gate name: accepted and delivered at
  once, the answer waits until the gate is released: it arrives late, or
  never if the client died), ``no_id`` (a 2xx without an id; nothing
  delivered), ``key`` (use this answer only for that Idempotency-Key),
  ``message`` (the error body's message instead of Resend's for the name),
  ``refuse`` (a batch only: ``{"INDEX": "message"}``, emails refused by index
  as a validation error would be).
* ``POST /_release``: ``{"gate": NAME}`` lets every request held at that gate
  go on, and every later one pass it at once. ``GET /_stats`` says how many
  wait at each gate (``held``). Gates let a test decide when an answer comes,
  rather than guess how long a delay must be: a request held until released
  outlasts any client's timeout, however loaded the machine.
* ``POST /_config``: ``{"latency": s, "hold": NAME|null, "idempotency": bool,
  "api_key": str|null, "rate_limit": n|null, "rate_window": s,
  "daily_quota": n|null, "monthly_quota": n|null, "quota_retry_after": s|null}``.
  ``hold`` holds every new request at that gate (as the answer field does);
  ``latency`` (seconds per new request) is for benchmarks, which measure a
  provider that takes its time; tests hold and release instead.

Domains (``receipts doctor``), a separate block below:

* ``GET /domains`` lists the account's sending domains as Resend does
  (``{"object": "list", "data": [{"id", "name", "status", "region",
  "created_at"}]}``), with the same key check as ``POST /emails``; a key in
  ``restricted_keys`` is accepted for sending but answered 401
  ``restricted_api_key`` here, as Resend answers a sending-only key.
* ``POST /_domains``: ``{"domains": [{"name": "example.com", "status":
  "verified"}], "restricted_keys": ["re_…"]}`` replaces both lists.
* ``POST /_clock``: ``{"advance": seconds}`` moves the clock keys age by.
* ``POST /_reset``: forget keys, deliveries, arrivals, counters and queued answers.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import collections
import hashlib
import json
import math
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests

KEY_RETENTION_SECONDS = 24 * 3600.0

# The message Resend's error page gives for each error name
# (https://resend.com/docs/api-reference/errors).
MESSAGES = {
    "invalid_idempotency_key": "The key must be between 1-256 chars.",
    "validation_error": "We found an error with one or more fields in the request.",
    "missing_api_key": "Missing API key in the authorization header.",
    "restricted_api_key": "This API key is restricted to only send emails.",
    "invalid_api_key": "API key is invalid.",
    "not_found": "The requested endpoint does not exist.",
    "method_not_allowed": "Method is not allowed for the requested path.",
    "invalid_idempotent_request": "Same idempotency key used with a different request payload.",
    "concurrent_idempotent_requests": (
        "Same idempotency key used while original request is still in progress."
    ),
    "invalid_attachment": "Attachment must have either a `content` or `path`.",
    "invalid_from_address": "Invalid `from` field.",
    "invalid_access": 'Access must be "full_access" | "sending_access".',
    "invalid_parameter": "The `parameter` must be a valid UUID.",
    "invalid_region": 'Region must be "us-east-1" | "eu-west-1" | "sa-east-1".',
    "missing_required_field": "The request body is missing one or more required fields.",
    "monthly_quota_exceeded": "You have reached your monthly email quota.",
    "daily_quota_exceeded": "You have reached your daily email quota.",
    "rate_limit_exceeded": (
        "Too many requests. Please limit the number of requests per second. "
        "Or contact support to increase rate limit."
    ),
    "security_error": "We may have found a security issue with the request.",
    "application_error": "An unexpected error occurred.",
    "internal_server_error": "An unexpected error occurred.",
}

Reply = tuple[int, dict[str, str], bytes]


@dataclass
class _KeyEntry:
    body_hash: str
    first_seen: float
    in_flight: bool = True
    status: int = 0
    body: bytes = b""


@dataclass
class _Answer:
    status: int = 200
    name: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    hold: str | None = None
    hold_answer: str | None = None
    no_id: bool = False
    key: str | None = None
    message: str | None = None
    refuse: dict[str, str] = field(default_factory=dict)


class _Limits:
    """The rate limit and the quotas; every method is called with the fake's lock held."""

    def __init__(self) -> None:
        self.rate_limit: int | None = None
        self.rate_window = 1.0
        self.daily_quota: int | None = None
        self.monthly_quota: int | None = None
        self.quota_retry_after: float | None = None
        self._admitted: collections.deque[float] = collections.deque()
        self._emails: list[float] = []  # when each new email was accepted (the fake's clock)
        self._reserved = 0  # new requests past the quota check, not yet answered

    def configure(self, settings: dict[str, Any]) -> None:
        for name in ("rate_limit", "daily_quota", "monthly_quota"):
            if name in settings:
                setattr(self, name, None if settings[name] is None else int(settings[name]))
        if "rate_window" in settings:
            self.rate_window = float(settings["rate_window"])
        if "quota_retry_after" in settings:
            value = settings["quota_retry_after"]
            self.quota_retry_after = None if value is None else float(value)

    def settings(self) -> dict[str, Any]:
        names = ("rate_limit", "rate_window", "daily_quota", "monthly_quota", "quota_retry_after")
        return {name: getattr(self, name) for name in names}

    def admit(self) -> tuple[bool, dict[str, str]]:
        """Count one request against the sliding window: (admitted, ratelimit headers)."""
        if self.rate_limit is None:
            return True, {}
        now = time.monotonic()
        while self._admitted and self._admitted[0] <= now - self.rate_window:
            self._admitted.popleft()
        admitted = len(self._admitted) < self.rate_limit
        if admitted:
            self._admitted.append(now)
        # Seconds until the oldest request in the window leaves it: a slot frees.
        frees_in = self._admitted[0] + self.rate_window - now if self._admitted else 0.0
        headers = {
            "ratelimit-limit": str(self.rate_limit),
            "ratelimit-remaining": str(self.rate_limit - len(self._admitted)),
            "ratelimit-reset": str(max(1, math.ceil(frees_in))),
        }
        if not admitted:
            headers["Retry-After"] = headers["ratelimit-reset"]
        return admitted, headers

    def quota_refusal(self, now: float) -> str | None:
        """The quota a new email would exceed, if any (counting those still being answered)."""
        if self.daily_quota is None and self.monthly_quota is None:
            return None  # without one, counting every email so far would only cost time
        used_today, used_month = self._used(now)
        used_today, used_month = used_today + self._reserved, used_month + self._reserved
        if self.monthly_quota is not None and used_month >= self.monthly_quota:
            return "monthly_quota_exceeded"
        if self.daily_quota is not None and used_today >= self.daily_quota:
            return "daily_quota_exceeded"
        return None

    def quota_headers(self, now: float) -> dict[str, str]:
        if self.daily_quota is None and self.monthly_quota is None:
            return {}
        used_today, used_month = self._used(now)
        return {"x-resend-daily-quota": str(used_today), "x-resend-monthly-quota": str(used_month)}

    def reserve(self) -> None:
        """A new request passed the quota check: it counts until it ends."""
        self._reserved += 1

    def settle(self, accepted_at: float | None) -> None:
        """The reserved request ended: one more email used, or none."""
        self._reserved -= 1
        if accepted_at is not None:
            self._emails.append(accepted_at)

    def _used(self, now: float) -> tuple[int, int]:
        day = time.gmtime(now)[:3]
        month = day[:2]
        today = sum(1 for at in self._emails if time.gmtime(at)[:3] == day)
        return today, sum(1 for at in self._emails if time.gmtime(at)[:2] == month)


class FakeResend:
    """The provider's state; every method is safe to call from many threads."""

    def __init__(
        self, *, latency: float = 0.0, api_key: str | None = None, idempotency: bool = True
    ) -> None:
        self.latency = latency
        self.api_key = api_key
        self.idempotency = idempotency
        self.hold_every: str | None = None
        self._lock = threading.Lock()
        self.limits = _Limits()
        self._gates: dict[str, threading.Event] = {}
        self._held: Counter[str] = Counter()
        self._reset_state()

    def _reset_state(self) -> None:
        self._keys: dict[str, _KeyEntry] = {}
        self._answers: list[_Answer] = []
        self._clock_offset = 0.0
        self.requests: Counter[str] = Counter()
        self.batch_requests = 0
        self.deliveries: list[dict[str, Any]] = []
        self.arrivals: list[float] = []
        self.received: list[tuple[float, str]] = []
        self.replays = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.rate_limited = 0
        self.quota_refused = 0

    def reset(self) -> None:
        """Forget keys, deliveries and counters (the configured limits stay); every
        held request goes on, and gates are closed again."""
        self.release_all()
        with self._lock:
            settings = self.limits.settings()
            self._reset_state()
            self.limits = _Limits()
            self.limits.configure(settings)
            self._gates.clear()

    def release(self, gate: str) -> None:
        """Requests held at ``gate`` go on; later ones pass it at once."""
        with self._lock:
            self._gates.setdefault(gate, threading.Event()).set()

    def release_all(self) -> None:
        with self._lock:
            for event in self._gates.values():
                event.set()

    def _wait_at(self, gate: str) -> None:
        with self._lock:
            event = self._gates.setdefault(gate, threading.Event())
            self._held[gate] += 1
        try:
            event.wait()
        finally:
            with self._lock:
                self._held[gate] -= 1

    def now(self) -> float:
        return time.time() + self._clock_offset

    def advance_clock(self, seconds: float) -> None:
        with self._lock:
            self._clock_offset += seconds

    def script(self, answers: list[dict[str, Any]], *, replace: bool = False) -> None:
        with self._lock:
            if replace:
                self._answers.clear()
            self._answers.extend(_Answer(**answer) for answer in answers)

    def configure(self, settings: dict[str, Any]) -> None:
        with self._lock:
            self.latency = float(settings.get("latency", self.latency))
            if "hold" in settings:
                self.hold_every = settings["hold"]
            self.idempotency = bool(settings.get("idempotency", self.idempotency))
            if "api_key" in settings:
                self.api_key = settings["api_key"]
            self.limits.configure(settings)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            delivered = Counter(delivery["key"] for delivery in self.deliveries)
            return {
                "requests": sum(self.requests.values()),
                "batch_requests": self.batch_requests,
                "deliveries": len(self.deliveries),
                "replays": self.replays,
                "requests_by_key": dict(self.requests),
                "deliveries_by_key": dict(delivered),
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
                "rate_limited": self.rate_limited,
                "quota_refused": self.quota_refused,
                "held": {gate: n for gate, n in self._held.items() if n},
            }

    def tagged(self) -> dict[str, int]:
        """How many emails were delivered with each ``message_key`` tag (a receipt's
        names its key; an email without one counts under ""): what a benchmark of a
        hundred thousand counts doubles by."""
        with self._lock:
            bodies = [delivery["body"] for delivery in self.deliveries]
        return dict(Counter(_message_key_tag(json.loads(body)) for body in bodies))

    def send_email(self, authorization: str | None, key: str | None, body: bytes) -> Reply:
        """Answer one ``POST /emails``: (status, headers, body)."""
        with self._lock:
            self.arrivals.append(time.monotonic())
            self.received.append((time.time(), key or ""))
        refused = self._check_credentials(authorization)
        if refused is not None:
            return refused
        with self._lock:
            self.requests[key or ""] += 1
            admitted, rate_headers = self.limits.admit()
            if not admitted:
                self.rate_limited += 1
                return _with(_error(429, "rate_limit_exceeded"), rate_headers)
            known = self._known_key_answer(key, body)
            if known is not None:
                return _with(known, rate_headers)
            quota = self._quota_refusal(key, rate_headers)
            if quota is not None:
                return quota
            answer = self._next_answer(key)
            self.limits.reserve()
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        accepted: list[float] = []
        try:
            return _with(self._answer_new_request(key, body, answer, accepted), rate_headers)
        finally:
            with self._lock:
                self.in_flight -= 1
                if not accepted:
                    self.limits.settle(None)

    def send_batch(
        self, authorization: str | None, key: str | None, body: bytes, permissive: bool
    ) -> Reply:
        """Answer one ``POST /emails/batch``: (status, headers, body)."""
        with self._lock:
            self.arrivals.append(time.monotonic())
            self.received.append((time.time(), key or ""))
        refused = self._check_credentials(authorization)
        if refused is not None:
            return refused
        with self._lock:
            self.requests[key or ""] += 1
            self.batch_requests += 1
            admitted, rate_headers = self.limits.admit()
            if not admitted:
                self.rate_limited += 1
                return _with(_error(429, "rate_limit_exceeded"), rate_headers)
            known = self._known_key_answer(key, body)
            if known is not None:
                return _with(known, rate_headers)
            answer = self._next_answer(key)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            reply = self._answer_batch(key, body, answer, permissive)
            return _with(self._remember(key, reply, answer), rate_headers)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _answer_batch(
        self, key: str | None, body: bytes, answer: _Answer, permissive: bool
    ) -> Reply:
        if self.latency:
            time.sleep(self.latency)
        gate = answer.hold or self.hold_every
        if gate is not None:
            self._wait_at(gate)
        if not 200 <= answer.status < 300:
            if answer.name is None:
                return answer.status, {}, b""
            return _error(answer.status, answer.name, answer.message)
        emails = _batch_emails(body)
        if emails is None:
            return _error(422, "validation_error", "The batch must be 1 to 100 emails.")
        problems = {
            index: problem
            for index, email in enumerate(emails)
            if (problem := answer.refuse.get(str(index)) or _batch_email_problem(email))
        }
        if problems and not permissive:
            return _error(422, "validation_error", next(iter(problems.values())))
        if answer.no_id:
            return answer.status, {}, b"{}"
        created = self._deliver_batch(key, emails, problems)
        if answer.hold_answer is not None:
            self._wait_at(answer.hold_answer)
        document: dict[str, Any] = {"data": [{"id": email_id} for email_id in created]}
        if permissive:
            document["errors"] = [
                {"index": index, "message": message} for index, message in problems.items()
            ]
        return answer.status, {}, json.dumps(document).encode()

    def _deliver_batch(
        self, key: str | None, emails: list[dict[str, Any]], problems: dict[int, str]
    ) -> list[str]:
        """Deliver every email not refused, in order; their ids."""
        created = []
        with self._lock:
            for index, email in enumerate(emails):
                if index in problems:
                    continue
                email_id = str(uuid.uuid4())
                created.append(email_id)
                self.limits._emails.append(self.now())
                self.deliveries.append(
                    {
                        "id": email_id,
                        "key": key or "",
                        "index": index,
                        "message_key": _message_key_tag(email),
                        "body": json.dumps(email),
                        "created_at": _iso(self.now()),
                    }
                )
        return created

    def _remember(self, key: str | None, reply: Reply, answer: _Answer) -> Reply:
        """Keep a successful answer for its key (replayed later); forget the key otherwise."""
        status, headers, content = reply
        with self._lock:
            entry = self._keys.get(key or "")
            if entry is not None and self.idempotency:
                if 200 <= status < 300 and not answer.no_id:
                    entry.in_flight, entry.status, entry.body = False, status, content
                else:
                    del self._keys[key or ""]
        return status, {**headers, **answer.headers}, content

    def _quota_refusal(self, key: str | None, rate_headers: dict[str, str]) -> Reply | None:
        """429 for a new email past a quota (lock held); the key stays free."""
        name = self.limits.quota_refusal(self.now())
        if name is None:
            return None
        self._keys.pop(key or "", None)
        self.quota_refused += 1
        headers = {**rate_headers, **self.limits.quota_headers(self.now())}
        if self.limits.quota_retry_after is not None:
            headers["Retry-After"] = str(math.ceil(self.limits.quota_retry_after))
        return _with(_error(429, name), headers)

    def _check_credentials(self, authorization: str | None) -> Reply | None:
        if self.api_key is None:
            return None
        if not authorization:
            return _error(401, "missing_api_key")
        if authorization != f"Bearer {self.api_key}":
            return _error(403, "invalid_api_key")
        return None

    def _known_key_answer(self, key: str | None, body: bytes) -> Reply | None:
        """Replay or refuse a remembered key; else remember this one (lock held)."""
        if not key or not self.idempotency:
            return None
        digest = hashlib.sha256(body).hexdigest()
        entry = self._keys.get(key)
        if entry is not None and self.now() - entry.first_seen >= KEY_RETENTION_SECONDS:
            entry = None
        if entry is None:
            self._keys[key] = _KeyEntry(body_hash=digest, first_seen=self.now())
            return None
        if entry.body_hash != digest:
            return _error(409, "invalid_idempotent_request")
        if entry.in_flight:
            return _error(409, "concurrent_idempotent_requests")
        self.replays += 1
        return entry.status, {}, entry.body

    def _next_answer(self, key: str | None) -> _Answer:
        for position, answer in enumerate(self._answers):
            if answer.key is None or answer.key == key:
                return self._answers.pop(position)
        return _Answer()

    def _answer_new_request(
        self, key: str | None, body: bytes, answer: _Answer, accepted: list[float]
    ) -> Reply:
        if self.latency:
            time.sleep(self.latency)
        gate = answer.hold or self.hold_every
        if gate is not None:
            self._wait_at(gate)
        result = self._outcome(key, body, answer, accepted)
        status, headers, content = result
        with self._lock:
            entry = self._keys.get(key or "")
            if entry is not None and self.idempotency:
                if 200 <= status < 300 and not answer.no_id:
                    entry.in_flight, entry.status, entry.body = False, status, content
                else:
                    del self._keys[key or ""]
            headers = {**headers, **self.limits.quota_headers(self.now())}
        return status, {**headers, **answer.headers}, content

    def _outcome(
        self, key: str | None, body: bytes, answer: _Answer, accepted: list[float]
    ) -> Reply:
        if not 200 <= answer.status < 300:
            if answer.name is None:
                return answer.status, {}, b""  # a bare status, as a proxy in the way answers
            return _error(answer.status, answer.name, answer.message)
        if not _is_valid_email(body):
            return _error(422, "validation_error")
        if not _attachments_have_content(body):
            return _error(422, "invalid_attachment")
        if answer.no_id:
            return answer.status, {}, b"{}"
        email_id = str(uuid.uuid4())
        with self._lock:
            accepted.append(self.now())
            self.limits.settle(accepted[0])
            self.deliveries.append(
                {
                    "id": email_id,
                    "key": key or "",
                    "body": body.decode("utf-8", "replace"),
                    "created_at": _iso(self.now()),
                }
            )
        if answer.hold_answer is not None:
            self._wait_at(answer.hold_answer)
        return answer.status, {}, json.dumps({"id": email_id}).encode()


def _iso(at: float) -> str:
    """A time as Resend writes ``created_at``: ``2023-04-03T22:13:42.674981+00:00``."""
    from datetime import UTC, datetime

    return datetime.fromtimestamp(at, UTC).isoformat()


def list_emails(fake: FakeResend, limit: int, after: str | None) -> Reply:
    """One page of ``GET /emails``, newest first (lock taken here)."""
    with fake._lock:
        sent = list(reversed(fake.deliveries))
    start = 0
    if after:
        ids = [delivery["id"] for delivery in sent]
        if after not in ids:
            return _error(422, "validation_error", "The `after` cursor is not an email id.")
        start = ids.index(after) + 1
    page = sent[start : start + limit]
    data = []
    for delivery in page:
        body = json.loads(delivery["body"])
        data.append(
            {"id": delivery["id"], "to": body.get("to"), "from": body.get("from"),
             "subject": body.get("subject"), "created_at": delivery["created_at"],
             "bcc": None, "cc": None, "reply_to": None, "last_event": "delivered",
             "scheduled_at": None}
        )  # fmt: skip
    has_more = start + limit < len(sent)
    return 200, {}, json.dumps({"object": "list", "has_more": has_more, "data": data}).encode()


def _batch_emails(body: bytes) -> list[dict[str, Any]] | None:
    """The batch's emails: a JSON array of 1 to 100 objects, else None."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    if not isinstance(document, list) or not 1 <= len(document) <= 100:
        return None
    if not all(isinstance(email, dict) for email in document):
        return None
    return document


def _batch_email_problem(email: dict[str, Any]) -> str | None:
    """Why Resend would refuse this email in a batch; None when it would not."""
    for name in ("from", "to", "subject"):
        if not email.get(name):
            return f"The `{name}` field is missing."
    if "attachments" in email:
        return "Attachments are not supported in batch emails."
    return None


def _message_key_tag(email: dict[str, Any]) -> str:
    tags = email.get("tags")
    for tag in tags if isinstance(tags, list) else []:
        if isinstance(tag, dict) and tag.get("name") == "message_key":
            return str(tag.get("value"))
    return ""


def _is_valid_email(body: bytes) -> bool:
    try:
        document = json.loads(body)
    except ValueError:
        return False
    return isinstance(document, dict) and all(
        document.get(name) for name in ("from", "to", "subject")
    )


def _attachments_have_content(body: bytes) -> bool:
    """Resend's check: each attachment has base64 ``content`` (or a ``path`` to fetch)."""
    found = json.loads(body).get("attachments")
    if found is None:
        return True
    if not isinstance(found, list):
        return False
    for item in found:
        if not isinstance(item, dict) or not isinstance(item.get("filename"), str):
            return False
        if "path" in item:
            continue
        try:
            base64.b64decode(str(item.get("content", "")), validate=True)
        except binascii.Error:
            return False
        if not item.get("content"):
            return False
    return True


def _error(status: int, name: str, message: str | None = None) -> Reply:
    """Resend's error body, with the documented message for the name unless given."""
    text = message or MESSAGES.get(name, "An unexpected error occurred.")
    return status, {}, json.dumps({"statusCode": status, "name": name, "message": text}).encode()


def _with(reply: Reply, headers: dict[str, str]) -> Reply:
    status, own, body = reply
    return status, {**headers, **own}, body


# --- sending domains (GET /domains), for `receipts doctor` -------------------------


@dataclass
class _Domains:
    """The account's sending domains, and the keys that may only send."""

    domains: list[dict[str, str]] = field(default_factory=list)
    restricted_keys: list[str] = field(default_factory=list)

    def configure(self, document: dict[str, Any]) -> None:
        self.domains = [dict(domain) for domain in document.get("domains", [])]
        self.restricted_keys = list(document.get("restricted_keys", []))

    def answer(
        self, fake: FakeResend, authorization: str | None
    ) -> tuple[int, dict[str, str], bytes]:
        if authorization and authorization.removeprefix("Bearer ") in self.restricted_keys:
            status, headers, _ = _error(401, "restricted_api_key")
            body = {"statusCode": 401, "name": "restricted_api_key",
                    "message": "This API key is restricted to only send emails"}  # fmt: skip
            return status, headers, json.dumps(body).encode()
        refused = fake._check_credentials(authorization)
        if refused is not None:
            return refused
        listed = [
            {"id": str(uuid.uuid5(uuid.NAMESPACE_DNS, domain["name"])), "name": domain["name"],
             "status": domain.get("status", "verified"), "region": "us-east-1",
             "created_at": "2026-01-01 00:00:00.000000+00"}
            for domain in self.domains
        ]  # fmt: skip
        return 200, {}, json.dumps({"object": "list", "data": listed}).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    server: _Server

    def do_GET(self) -> None:
        fake = self.server.fake
        if self.path == "/_stats":
            self._reply(200, {}, json.dumps(fake.stats()).encode())
        elif self.path == "/_deliveries":
            with fake._lock:
                deliveries = list(fake.deliveries)
            self._reply(200, {}, json.dumps(deliveries).encode())
        elif self.path == "/_tagged":
            self._reply(200, {}, json.dumps(fake.tagged()).encode())
        elif self.path == "/_arrivals":
            with fake._lock:
                arrivals = list(fake.arrivals)
            self._reply(200, {}, json.dumps(arrivals).encode())
        elif self.path == "/_received":
            with fake._lock:
                received = list(fake.received)
            self._reply(200, {}, json.dumps(received).encode())
        elif self.path == "/domains":
            self._reply(*self.server.domains.answer(fake, self.headers.get("Authorization")))
        elif self.path.split("?")[0] == "/emails":
            self._reply(*self._list_emails())
        else:
            self._reply(*_error(404, "not_found"))

    def _list_emails(self) -> Reply:
        authorization = self.headers.get("Authorization")
        if authorization and authorization.removeprefix("Bearer ") in (
            self.server.domains.restricted_keys
        ):
            return _error(401, "restricted_api_key")
        refused = self.server.fake._check_credentials(authorization)
        if refused is not None:
            return refused
        query = parse_qs(urlsplit(self.path).query)
        try:
            limit = int((query.get("limit") or ["20"])[0])
        except ValueError:
            limit = 0
        if not 1 <= limit <= 100:
            return _error(422, "validation_error", "The `limit` must be between 1 and 100.")
        after = query.get("after")
        return list_emails(self.server.fake, limit, after[0] if after else None)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        fake = self.server.fake
        if self.path == "/emails":
            self._reply(
                *fake.send_email(
                    self.headers.get("Authorization"), self.headers.get("Idempotency-Key"), body
                )
            )
            return
        if self.path == "/emails/batch":
            permissive = self.headers.get("x-batch-validation", "strict") == "permissive"
            authorization = self.headers.get("Authorization")
            key = self.headers.get("Idempotency-Key")
            self._reply(*fake.send_batch(authorization, key, body, permissive))
            return
        command = json.loads(body or b"{}")
        if self.path == "/_script":
            fake.script(command.get("answers", []), replace=bool(command.get("replace")))
        elif self.path == "/_config":
            fake.configure(command)
        elif self.path == "/_clock":
            fake.advance_clock(float(command.get("advance", 0)))
        elif self.path == "/_release":
            fake.release(str(command["gate"]))
        elif self.path == "/_reset":
            fake.reset()
        elif self.path == "/_domains":
            self.server.domains.configure(command)
        else:
            self._reply(*_error(404, "not_found"))
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
            pass  # the client gave up or died; the answer is lost, as on a real network

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, port: int, fake: FakeResend) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.fake = fake
        self.domains = _Domains()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class FakeProviderClient:
    """The control API over HTTP, for a fake provider in this or another process."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = requests.get(f"{self.url}/_stats", timeout=5).json()
        return result

    def deliveries(self) -> list[dict[str, str]]:
        result: list[dict[str, str]] = requests.get(f"{self.url}/_deliveries", timeout=5).json()
        return result

    def tagged(self) -> dict[str, int]:
        """Deliveries per message_key tag."""
        result: dict[str, int] = requests.get(f"{self.url}/_tagged", timeout=60).json()
        return result

    def arrivals(self) -> list[float]:
        """When each send request arrived, in order (seconds; only the gaps mean anything)."""
        result: list[float] = requests.get(f"{self.url}/_arrivals", timeout=5).json()
        return result

    def received(self) -> list[tuple[float, str]]:
        """(wall-clock time, Idempotency-Key) of each send request, in arrival order."""
        result = requests.get(f"{self.url}/_received", timeout=30).json()
        return [(float(at), str(key)) for at, key in result]

    def script(self, *answers: dict[str, Any]) -> None:
        self._post("/_script", {"answers": list(answers)})

    def clear_script(self) -> None:
        """Forget the queued answers no request has used yet."""
        self._post("/_script", {"answers": [], "replace": True})

    def configure(self, **settings: Any) -> None:
        self._post("/_config", settings)

    def release(self, gate: str) -> None:
        """Let the requests held at ``gate`` go on, and later ones pass it at once."""
        self._post("/_release", {"gate": gate})

    def held(self, gate: str) -> int:
        """How many requests wait at ``gate`` now."""
        count: int = self.stats()["held"].get(gate, 0)
        return count

    def advance_clock(self, seconds: float) -> None:
        self._post("/_clock", {"advance": seconds})

    def reset(self) -> None:
        self._post("/_reset", {})

    def set_domains(
        self, domains: list[dict[str, str]], restricted_keys: list[str] | None = None
    ) -> None:
        """The account's sending domains (``{"name", "status"}``) and sending-only keys."""
        self._post("/_domains", {"domains": domains, "restricted_keys": restricted_keys or []})

    def _post(self, path: str, document: dict[str, Any]) -> None:
        requests.post(f"{self.url}{path}", json=document, timeout=5).raise_for_status()


@contextmanager
def running_fake_provider(**options: Any) -> Iterator[FakeProviderClient]:
    """A fake provider on a free port, served from a thread of this process."""
    server = _Server(0, FakeResend(**options))
    thread = threading.Thread(
        target=server.serve_forever, args=(0.01,), name="fake-provider", daemon=True
    )
    thread.start()
    try:
        yield FakeProviderClient(server.url)
    finally:
        server.fake.release_all()  # no request of a finished test waits on
        server.shutdown()
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A fake Resend API for tests and benchmarks.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per new request")
    parser.add_argument("--api-key", default=None, help="require this bearer token")
    parser.add_argument("--no-idempotency", action="store_true", help="ignore Idempotency-Key")
    parser.add_argument("--rate-limit", type=int, default=None, help="requests per second")
    parser.add_argument("--daily-quota", type=int, default=None, help="new emails per UTC day")
    args = parser.parse_args(argv)
    fake = FakeResend(
        latency=args.latency, api_key=args.api_key, idempotency=not args.no_idempotency
    )
    fake.configure({"rate_limit": args.rate_limit, "daily_quota": args.daily_quota})
    server = _Server(args.port, fake)

    def stop() -> None:
        fake.release_all()
        server.shutdown()

    signal.signal(signal.SIGTERM, lambda signum, frame: threading.Thread(target=stop).start())
    print(f"listening on {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
