"""``receipts replay FILE|-``: sign a saved Stripe event and POST it, as Stripe would.

The event is the JSON that ``stripe events retrieve evt_…`` or the Dashboard
shows. Each delivery is signed at send time with every configured secret
(``t=…,v1=…``, HMAC-SHA256 over ``{t}.{body}``), the way Stripe signs during a
secret rotation. Without STRIPE_WEBHOOK_SECRET the secret ``receipts dev``
generated in the dev state folder is used, and without ``--url`` the running
``receipts dev``'s own webhook URL (its ``--port``), also when replay runs in
another folder. ``--times`` and ``--concurrent`` reproduce a redelivery storm;
the summary counts status codes and outcomes, a redelivery of an event already
stored counting as ``duplicate``.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

from receipts.config import ConfigError, load_settings
from receipts.dev.state import DEV_WEBHOOK_URL, find_running, read_dev_secret, state_dir

REQUEST_TIMEOUT_SECONDS = 10.0
MAX_TIMES = 10_000
MAX_CONCURRENT = 100


class BadEvent(Exception):
    """The file is missing, unreadable, not JSON, or not a Stripe event."""


@dataclass(frozen=True, kw_only=True)
class SavedEvent:
    body: bytes
    event_id: str
    event_type: str


@dataclass(frozen=True, kw_only=True)
class Delivery:
    """What one POST got back: an HTTP status and the app's outcome, or a network error."""

    status: int | None
    outcome: str

    @property
    def accepted(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("event", metavar="FILE", help="a saved Stripe event (JSON), or - for stdin")
    parser.add_argument(
        "--url",
        type=_http_url,
        default=None,
        help=f"webhook endpoint (default: the running `receipts dev`'s, else {DEV_WEBHOOK_URL})",
    )
    parser.add_argument(
        "--times", type=_bounded(1, MAX_TIMES), default=1, help="deliveries to make (default: 1)"
    )
    parser.add_argument(
        "--concurrent",
        type=_bounded(1, MAX_CONCURRENT),
        default=1,
        help="deliveries in flight at once (default: 1)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="dev state folder with the generated secret (default: RECEIPTS_DEV_DIR or .receipts)",
    )


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    try:
        event = read_event(args.event)
    except BadEvent as problem:
        print(f"receipts replay: {problem}", file=sys.stderr)
        return 2
    settings = load_settings(environ)
    running = find_running(environ, args.state_dir)
    url = args.url or (running.webhook_url if running else DEV_WEBHOOK_URL)
    secrets = settings.stripe_webhook_secrets
    if not secrets:
        folder = running.folder if running else state_dir(settings, args.state_dir)
        dev_secret = read_dev_secret(folder)
        if dev_secret is None:
            raise ConfigError(
                "STRIPE_WEBHOOK_SECRET",
                f"is not set and {folder} holds no dev secret (start `receipts dev` first)",
            )
        secrets = (dev_secret,)
    deliveries = replay(event, url, secrets, times=args.times, concurrent=args.concurrent)
    print_summary(event, url, deliveries)
    return 0 if all(delivery.accepted for delivery in deliveries) else 1


def read_event(source: str) -> SavedEvent:
    """Read and check one saved event; the bytes are sent exactly as read."""
    name = "stdin" if source == "-" else source
    try:
        body = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise BadEvent(f"cannot read {name}: {exc.strerror or exc}") from None
    try:
        event = json.loads(body)
    except ValueError as exc:
        raise BadEvent(f"{name} is not JSON: {exc}") from None
    if not isinstance(event, dict):
        raise BadEvent(f"{name} is not a Stripe event: expected a JSON object")
    data = event.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("object"), dict):
        raise BadEvent(f"{name} is not a Stripe event: no 'data.object'")
    return SavedEvent(
        body=body,
        event_id=_text_field(event, "id", name),
        event_type=_text_field(event, "type", name),
    )


def _text_field(event: dict[str, Any], field: str, name: str) -> str:
    value = event.get(field)
    if not isinstance(value, str) or not value:
        raise BadEvent(f"{name} is not a Stripe event: no {field!r} string")
    return value


def stripe_signature(body: bytes, secrets: Sequence[str], timestamp: int) -> str:
    """The Stripe-Signature header Stripe would send: ``t=…`` and one ``v1=…`` per secret."""
    signed = f"{timestamp}.".encode() + body
    signatures = [hmac.new(s.encode(), signed, hashlib.sha256).hexdigest() for s in secrets]
    return ",".join([f"t={timestamp}", *(f"v1={signature}" for signature in signatures)])


def deliver(event: SavedEvent, url: str, secrets: Sequence[str]) -> Delivery:
    """POST the event once, freshly signed."""
    headers = {
        "Content-Type": "application/json; charset=utf-8",
        "Stripe-Signature": stripe_signature(event.body, secrets, int(time.time())),
        "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks) receipts-replay",
    }
    try:
        response = requests.post(
            url, data=event.body, headers=headers, timeout=REQUEST_TIMEOUT_SECONDS
        )
    except requests.RequestException as exc:
        return Delivery(status=None, outcome=f"no answer: {type(exc).__name__}")
    return Delivery(status=response.status_code, outcome=_outcome(response))


def _outcome(response: requests.Response) -> str:
    try:
        answer = response.json()
    except ValueError:
        return response.reason or ""
    if isinstance(answer, dict):
        outcome = answer.get("outcome") or answer.get("error")
        if answer.get("redelivery") is True:
            # Stored already: this delivery changed nothing, whatever the first one did.
            outcome = "duplicate"
        key = answer.get("message_key")
        if outcome:
            return f"{outcome} {key}" if key else str(outcome)
    return response.reason or ""


def replay(
    event: SavedEvent, url: str, secrets: Sequence[str], *, times: int, concurrent: int
) -> list[Delivery]:
    """Deliver the event ``times`` times, ``concurrent`` at once."""
    if concurrent == 1:
        return [deliver(event, url, secrets) for _ in range(times)]
    with ThreadPoolExecutor(max_workers=min(concurrent, times)) as pool:
        return list(pool.map(lambda _: deliver(event, url, secrets), range(times)))


def print_summary(event: SavedEvent, url: str, deliveries: list[Delivery]) -> None:
    print(f"{event.event_id} ({event.event_type}) -> {url}, {len(deliveries)} delivery(ies):")
    counts = Counter((delivery.status, delivery.outcome) for delivery in deliveries)
    for (status, outcome), count in sorted(counts.items(), key=lambda item: str(item[0])):
        print(f"  {count:>5} x {status if status is not None else '---'} {outcome}")
    if all(delivery.status is None for delivery in deliveries):
        print(f"  nothing answered at {url}: is `receipts dev` running?")


def _http_url(raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"not an http(s) URL: {raw!r}")
    return raw


def _bounded(low: int, high: int) -> Any:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {raw!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, got {value}")
        return value

    return parse
