"""Stripe's side: signed ``invoice.paid`` deliveries, as Stripe makes them.

New invoices, redeliveries of an event already answered (same id, same body),
duplicates (another event for an invoice already paid), the same event
delivered by several connections at once, and, like Stripe, a later
redelivery of every event that got no 200. Every answer is kept in memory and
appended to ``answers.jsonl``.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import requests

from tests import stripe_events
from tests.stripe_events import TEST_SECRET, sign

REQUEST_TIMEOUT = 20.0  # longer than any answer the product promises (statement timeout + a few s)
SENDERS = 6  # connections Stripe has open at once


@dataclass(frozen=True)
class Delivery:
    event_id: str
    invoice: dict[str, Any]
    body: bytes

    @property
    def invoice_id(self) -> str:
        return str(self.invoice["id"])


@dataclass(frozen=True)
class Answer:
    at: float  # seconds since the soak started
    kind: str  # new, redelivery, duplicate, concurrent, retry, final
    event_id: str
    invoice_id: str
    status: int  # 0: no HTTP answer (refused, reset, timed out)
    outcome: str | None
    message_key: str | None
    ms: int
    error: str | None


class Stripe:
    """Sends deliveries to ``url`` from a few threads; remembers every answer."""

    def __init__(self, url: str, rng: random.Random, answers_path: Path, started: float) -> None:
        self.url = url + "/webhooks/stripe"
        self._rng = rng
        self._started = started
        self._file = answers_path.open("a")
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(SENDERS, thread_name_prefix="stripe")
        self._slots = threading.Semaphore(SENDERS * 2)
        self.answers: list[Answer] = []
        self.deliveries: list[Delivery] = []  # one per event, in order made
        self.answered: set[str] = set()  # event ids that got a 200
        self._retry_due: dict[str, float] = {}  # event id -> when Stripe tries again
        self.sent = Counter[str]()  # deliveries sent, by kind

    # --- what Stripe does ---------------------------------------------------

    def step(self) -> None:
        """One moment of Stripe's traffic, picked at random."""
        due = self._due_retry()
        if due is not None:
            self._submit(due, "retry")
            return
        roll = self._rng.random()
        if roll < 0.6 or not self.deliveries:
            self._submit(self._new_event(), "new")
        elif roll < 0.75:
            self._submit(self._rng.choice(self.deliveries), "redelivery")
        elif roll < 0.85:
            paid = self._rng.choice(self.deliveries)
            self._submit(self._new_event(paid.invoice), "duplicate")
        else:
            delivery = self._rng.choice([self._new_event(), self._rng.choice(self.deliveries)])
            for _ in range(self._rng.randint(2, 4)):
                self._submit(delivery, "concurrent")

    def redeliver_unanswered(self, within: float) -> list[str]:
        """Redeliver every event that never got a 200 until each has one, for at
        most ``within`` seconds; return the event ids still without one."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            missing = [d for d in self.deliveries if d.event_id not in self.answered]
            if not missing:
                return []
            for delivery in missing:
                self._submit(delivery, "final")
            self.wait_idle()
            time.sleep(1)
        return [d.event_id for d in self.deliveries if d.event_id not in self.answered]

    def wait_idle(self) -> None:
        for _ in range(SENDERS * 2):
            self._slots.acquire()
        for _ in range(SENDERS * 2):
            self._slots.release()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._file.close()

    # --- machinery ----------------------------------------------------------

    def _new_event(self, invoice: dict[str, Any] | None = None) -> Delivery:
        """A new event: a new paid invoice, or another event for one already paid
        (the same invoice, so the same receipt)."""
        invoice = invoice or stripe_events.invoice()
        event = stripe_events.event(invoice)
        delivery = Delivery(event["id"], invoice, json.dumps(event).encode())
        with self._lock:
            self.deliveries.append(delivery)
        return delivery

    def _due_retry(self) -> Delivery | None:
        now = time.monotonic()
        with self._lock:
            for event_id, due in list(self._retry_due.items()):
                if event_id in self.answered:
                    del self._retry_due[event_id]
                elif due <= now:
                    del self._retry_due[event_id]
                    return next(d for d in self.deliveries if d.event_id == event_id)
        return None

    def _submit(self, delivery: Delivery, kind: str) -> None:
        self._slots.acquire()
        with self._lock:
            self.sent[kind] += 1
        self._pool.submit(self._deliver, delivery, kind)

    def _deliver(self, delivery: Delivery, kind: str) -> None:
        try:
            answer = self._post(delivery, kind)
            with self._lock:
                self.answers.append(answer)
                self._file.write(json.dumps(asdict(answer)) + "\n")
                self._file.flush()
                if answer.status == 200:
                    self.answered.add(delivery.event_id)
                elif delivery.event_id not in self.answered:
                    # Stripe retries for days; here, within seconds
                    self._retry_due[delivery.event_id] = time.monotonic() + self._rng.uniform(1, 8)
        finally:
            self._slots.release()

    def _post(self, delivery: Delivery, kind: str) -> Answer:
        started = time.monotonic()
        status, document, error = 0, {}, None
        try:
            response = requests.post(
                self.url,
                data=delivery.body,
                headers={
                    "Stripe-Signature": sign(delivery.body, TEST_SECRET),
                    "Content-Type": "application/json",
                },
                timeout=REQUEST_TIMEOUT,
            )
            status = response.status_code
            document = _json(response)
        except requests.RequestException as exc:
            error = type(exc).__name__
        return Answer(
            at=round(started - self._started, 3),
            kind=kind,
            event_id=delivery.event_id,
            invoice_id=delivery.invoice_id,
            status=status,
            outcome=document.get("outcome"),
            message_key=document.get("message_key"),
            ms=round((time.monotonic() - started) * 1000),
            error=error or document.get("error"),
        )


def _json(response: requests.Response) -> dict[str, Any]:
    try:
        document = response.json()
    except ValueError:
        return {}
    return document if isinstance(document, dict) else {}
