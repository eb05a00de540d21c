"""A real local HTTP server that answers the Stripe API reads receipts makes, by Stripe's rules.

Use it in-thread (``with running_fake_stripe_api() as stripe_api: stripe_api.url``)
or as a process of its own::

    python -m tests.fake_stripe_api --port 12111 --api-key rk_test_demo [--seed FILE.json]

It prints ``listening on http://127.0.0.1:PORT`` once ready and runs until
SIGTERM/SIGINT. ``--seed`` loads a JSON document of the ``/_state`` form.

Rules it keeps, like Stripe:

* ``Authorization: Bearer KEY`` must match the API key (else 401
  ``invalid_request_error`` "Invalid API Key provided").
* ``Stripe-Account: acct_…`` or ``Stripe-Context: …/acct_…`` selects a
  connected account's objects; an object of another account is a 404
  ``resource_missing``, as is an unknown id.
* Lists are newest first (``created``, then id) and page with ``limit`` (at
  most 100) and ``starting_after``; ``GET /v1/events`` filters on ``type``,
  ``types[]``, ``created[gte|gt|lte|lt]`` and ``delivery_success``;
  ``GET /v1/invoices`` on ``status`` and ``created``; ``GET
  /v1/invoice_payments`` on ``invoice`` or ``payment[type]`` with
  ``payment[payment_intent]`` (Stripe requires one of the two), and ``status``;
  ``GET /v1/refunds`` on ``charge``; ``GET /v1/credit_notes`` on ``invoice``.
* ``GET /v1/refunds/{id}`` and ``GET /v1/credit_notes/{id}`` answer one object.
* ``GET /v1/payment_intents/{id}?expand[0]=latest_charge`` embeds the charge.
* ``GET /v1/webhook_endpoints`` lists the account's endpoints (``receipts doctor``).
* ``GET /v1/tax_ids/{id}`` answers an account's tax id (Stripe's Tax ID object:
  ``type``, ``value``, ``owner``), ``GET /v1/products/{id}`` a product, each
  only in the account that owns it.

Control API (JSON): ``POST /_state`` ``{"account": "platform", "invoices": [],
"events": [{"event": {...}, "delivered": false}], "customers": [], "charges": [],
"payment_intents": [], "invoice_payments": [], "payment_records": [],
"webhook_endpoints": [], "tax_ids": [], "products": [], "refunds": [],
"credit_notes": []}`` adds
objects; ``POST /_script`` ``{"answers": [{"status": 500, "path": "/v1/invoices",
"headers": {"Retry-After": "1"}, "after": 0, "message": "…"}]}`` queues error answers for the next
requests whose path starts with ``path`` (any path when absent), each once
``after`` such requests went through; ``POST /_latency`` ``{"path":
"/v1/invoices/", "seconds": 1.5}`` makes every request whose path starts with
``path`` take that long (each page of a list too); ``GET /_requests``
lists every API request (method, path, query, account headers);
``POST /_reset`` forgets everything.

A latency is slept, unless the fake was given a clock (in-thread,
``running_fake_stripe_api(clock=ManualClock())``): the time is then spent on
that clock, which the code under test reads too, and nothing waits.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import requests

from tests.helpers import ManualClock

Json = dict[str, Any]
Answer = tuple[int, dict[str, str], Json]
KINDS = (
    "invoices", "customers", "charges", "payment_intents", "payment_records", "webhook_endpoints",
    "tax_ids", "products", "refunds", "credit_notes",
)  # fmt: skip


class FakeStripe:
    """The API's state; every method is safe to call from many threads."""

    def __init__(self, api_key: str = "rk_test_fake", clock: ManualClock | None = None) -> None:
        self.api_key = api_key
        self._clock = clock
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self._objects: dict[str, dict[str, dict[str, Json]]] = {}  # account -> kind -> id -> obj
        self._lines: dict[str, list[Json]] = {}
        self._events: dict[str, list[tuple[Json, bool]]] = {}
        self._invoice_payments: dict[str, list[Json]] = {}
        self._script: list[Json] = []
        self._latencies: list[tuple[str, float]] = []
        self.requests: list[Json] = []

    def add(self, document: Json) -> None:
        account = document.get("account", "platform")
        with self._lock:
            objects = self._objects.setdefault(account, {})
            for kind in KINDS:
                for found in document.get(kind, []):
                    found = dict(found)
                    if kind == "invoices":
                        self._lines[found["id"]] = found.pop("_all_lines", found["lines"]["data"])
                    objects.setdefault(kind, {})[found["id"]] = found
            for entry in document.get("events", []):
                self._events.setdefault(account, []).append(
                    (entry["event"], bool(entry.get("delivered", False)))
                )
            for payment in document.get("invoice_payments", []):
                self._invoice_payments.setdefault(account, []).append(payment)

    def script(self, answers: list[Json]) -> None:
        with self._lock:
            self._script.extend(answers)

    def slow_down(self, path: str, seconds: float) -> None:
        with self._lock:
            self._latencies.append((path, seconds))

    def handle(self, path: str, query: list[tuple[str, str]], headers: Any) -> Answer:
        answer = self._answer(path, query, headers)
        self._take_time(path)
        return answer

    def _take_time(self, path: str) -> None:
        """The latency set for this path: spent on the shared clock, else slept."""
        with self._lock:
            seconds = sum(taken for prefix, taken in self._latencies if path.startswith(prefix))
        if seconds and self._clock is not None:
            self._clock.advance(seconds)
        elif seconds:
            time.sleep(seconds)

    def _answer(self, path: str, query: list[tuple[str, str]], headers: Any) -> Answer:
        account = _account(headers)
        with self._lock:
            self.requests.append({"method": "GET", "path": path, "query": dict(query),
                                  "stripe_account": headers.get("Stripe-Account"),
                                  "stripe_context": headers.get("Stripe-Context")})  # fmt: skip
            if headers.get("Authorization") != f"Bearer {self.api_key}":
                return _error(401, "invalid_request_error", None, "Invalid API Key provided")
            scripted = self._scripted(path)
            if scripted is not None:
                return scripted
            return self._route(path, dict(query), query, account)

    def _scripted(self, path: str) -> Answer | None:
        for position, answer in enumerate(self._script):
            if path.startswith(answer.get("path", "")):
                if answer.get("after", 0) > 0:
                    answer["after"] -= 1  # let this many matching requests through first
                    continue
                del self._script[position]
                status = int(answer.get("status", 500))
                kind = {429: "rate_limit_error", 500: "api_error"}.get(
                    status, "invalid_request_error"
                )
                message = str(answer.get("message", "a scripted failure"))
                _, _, body = _error(status, kind, answer.get("code"), message)
                return status, dict(answer.get("headers", {})), body
        return None

    def _route(self, path: str, params: dict[str, str], raw: list[tuple[str, str]],
               account: str) -> Answer:  # fmt: skip
        parts = path.strip("/").split("/")
        if parts[:2] == ["v1", "events"] and len(parts) == 2:
            return self._list(path, self._matching_events(account, params, raw), params)
        if parts[:2] == ["v1", "invoice_payments"] and len(parts) == 2:
            listed = [p for p in self._invoice_payments.get(account, []) if _pays(p, params)
                      and params.get("status", p["status"]) == p["status"]]  # fmt: skip
            return self._list(path, listed, params)
        if parts[:2] == ["v1", "refunds"] and len(parts) == 2:
            refunds = [r for r in self._kind(account, "refunds").values()
                       if params.get("charge", r.get("charge")) == r.get("charge")]  # fmt: skip
            return self._list(path, refunds, params)
        if parts[:2] == ["v1", "credit_notes"] and len(parts) == 2:
            notes = [n for n in self._kind(account, "credit_notes").values()
                     if params.get("invoice", n.get("invoice")) == n.get("invoice")]  # fmt: skip
            return self._list(path, notes, params)
        if parts[:2] == ["v1", "invoices"] and len(parts) == 2:
            invoices = [i for i in self._kind(account, "invoices").values()
                        if params.get("status", i["status"]) == i["status"]
                        and _created_ok(i, params)]  # fmt: skip
            return self._list(path, invoices, params)
        if parts[:2] == ["v1", "invoices"] and len(parts) == 4 and parts[3] == "lines":
            if parts[2] not in self._kind(account, "invoices"):
                return _missing("invoice", parts[2])
            return self._list(path, self._lines[parts[2]], params, newest_first=False)
        if parts[:2] == ["v1", "webhook_endpoints"] and len(parts) == 2:
            endpoints = list(self._kind(account, "webhook_endpoints").values())
            return self._list(path, endpoints, params)
        if len(parts) == 3 and parts[0] == "v1" and parts[1] in KINDS:
            return self._one(account, parts[1], parts[2], raw)
        return _error(404, "invalid_request_error", None, f"Unrecognized request URL (GET: {path})")

    def _kind(self, account: str, kind: str) -> dict[str, Json]:
        return self._objects.get(account, {}).get(kind, {})

    def _one(self, account: str, kind: str, object_id: str, raw: list[tuple[str, str]]) -> Answer:
        found = self._kind(account, kind).get(object_id)
        if found is None:
            return _missing(kind[:-1], object_id)
        found = dict(found)
        expand = {value for key, value in raw if key.startswith("expand")}
        if kind == "payment_intents" and "latest_charge" in expand:
            found["latest_charge"] = self._kind(account, "charges").get(found["latest_charge"])
        return 200, {}, found

    def _matching_events(self, account: str, params: dict[str, str],
                         raw: list[tuple[str, str]]) -> list[Json]:  # fmt: skip
        types = {value for key, value in raw if key.startswith("types[")}
        if "type" in params:
            types.add(params["type"])
        success = params.get("delivery_success")
        return [event for event, delivered in self._events.get(account, [])
                if (not types or event["type"] in types) and _created_ok(event, params)
                and (success is None or (success == "true") == delivered)]  # fmt: skip

    def _list(self, path: str, items: list[Json], params: dict[str, str], *,
              newest_first: bool = True) -> Answer:  # fmt: skip
        if newest_first:
            items = sorted(items, key=lambda i: (i.get("created", 0), i["id"]), reverse=True)
        after = params.get("starting_after")
        if after is not None:
            ids = [item["id"] for item in items]
            items = items[ids.index(after) + 1 :] if after in ids else []
        limit = min(int(params.get("limit", 10)), 100)
        page = [_public(item) for item in items[:limit]]
        return 200, {}, {"object": "list", "data": page, "has_more": len(items) > limit,
                         "url": path}  # fmt: skip


def _pays(payment: Json, params: dict[str, str]) -> bool:
    """An invoice payment matches ``invoice`` or ``payment[type]`` + ``payment[payment_intent]``."""
    if "invoice" in params:
        return bool(payment["invoice"] == params["invoice"])
    paid_by = payment.get("payment") or {}
    if params.get("payment[type]") != paid_by.get("type"):
        return False
    kind = str(paid_by.get("type"))
    return bool(params.get(f"payment[{kind}]") == paid_by.get(kind))


def _public(found: Json) -> Json:
    return {key: value for key, value in found.items() if not key.startswith("_")}


def _account(headers: Any) -> str:
    context = headers.get("Stripe-Context")
    if context:
        return str(context).split("/")[-1]
    return str(headers.get("Stripe-Account") or "platform")


def _created_ok(found: Json, params: dict[str, str]) -> bool:
    created = found.get("created", 0)
    checks = {"gte": created.__ge__, "gt": created.__gt__, "lte": created.__le__,
              "lt": created.__lt__}  # fmt: skip
    return all(check(int(params[f"created[{op}]"])) for op, check in checks.items()
               if f"created[{op}]" in params)  # fmt: skip


def _missing(kind: str, object_id: str) -> Answer:
    return _error(404, "invalid_request_error", "resource_missing",
                  f"No such {kind}: '{object_id}'", param="id")  # fmt: skip


def _error(status: int, kind: str, code: str | None, message: str, param: str | None = None
           ) -> Answer:  # fmt: skip
    error: Json = {"type": kind, "message": message}
    if code is not None:
        error["code"] = code
    if param is not None:
        error["param"] = param
    return status, {}, {"error": error}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if parts.path == "/_requests":
            with self.server.fake._lock:
                self._reply(200, {}, {"requests": list(self.server.fake.requests)})
            return
        self._reply(*self.server.fake.handle(parts.path, parse_qsl(parts.query), self.headers))

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        command = json.loads(body or b"{}")
        fake = self.server.fake
        if self.path == "/_state":
            fake.add(command)
        elif self.path == "/_script":
            fake.script(command.get("answers", []))
        elif self.path == "/_latency":
            fake.slow_down(str(command.get("path", "")), float(command.get("seconds", 0)))
        elif self.path == "/_reset":
            with fake._lock:
                fake.reset()
        else:
            self._reply(*_error(404, "invalid_request_error", None, "the fake API only reads"))
            return
        self._reply(200, {}, {})

    def _reply(self, status: int, headers: dict[str, str], document: Json) -> None:
        data = json.dumps(document).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Request-Id", "req_fake")
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, fake: FakeStripe) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.fake = fake

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class FakeStripeClient:
    """The control API over HTTP, for a fake Stripe API in this or another process."""

    def __init__(self, url: str, api_key: str) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key

    def add(self, account: str = "platform", **objects: list[Json]) -> None:
        self._post("/_state", {"account": account, **objects})

    def add_event(self, event: Json, *, delivered: bool = False, account: str = "platform") -> None:
        self.add(account, events=[{"event": event, "delivered": delivered}])

    def script(self, *answers: Json) -> None:
        self._post("/_script", {"answers": list(answers)})

    def latency(self, path: str, seconds: float) -> None:
        """Every later request whose path starts with ``path`` takes ``seconds`` more."""
        self._post("/_latency", {"path": path, "seconds": seconds})

    def requests(self, path_prefix: str = "/v1/") -> list[Json]:
        found = requests.get(f"{self.url}/_requests", timeout=5).json()["requests"]
        return [r for r in found if r["path"].startswith(path_prefix)]

    def reset(self) -> None:
        self._post("/_reset", {})

    def _post(self, path: str, document: Json) -> None:
        requests.post(f"{self.url}{path}", json=document, timeout=5).raise_for_status()


@contextmanager
def running_fake_stripe_api(
    api_key: str = "rk_test_fake", *, clock: ManualClock | None = None
) -> Iterator[FakeStripeClient]:
    """A fake Stripe API on a free port, served from a thread of this process; its
    latencies are spent on ``clock`` when one is given."""
    server = _Server(0, FakeStripe(api_key, clock))
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield FakeStripeClient(server.url, api_key)
    finally:
        server.shutdown()
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A fake Stripe API for tests and demos.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--api-key", default="rk_test_fake")
    parser.add_argument("--seed", type=Path, help="a JSON document (or list of them) for /_state")
    args = parser.parse_args(argv)
    fake = FakeStripe(args.api_key)
    if args.seed is not None:
        seed = json.loads(args.seed.read_text())
        for document in seed if isinstance(seed, list) else [seed]:
            fake.add(document)
    server = _Server(args.port, fake)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
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
