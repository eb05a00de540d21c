"""Waking the workers after ingest commits: a NOTIFY sent after the commit, never inside it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from receipts.ingest.wakeup import WakeUp
from receipts.vocabulary import NOTIFY_CHANNEL
from tests import stripe_events
from tests.stripe_events import TEST_SECRET, encode, sign
from tests.tcp_proxy import proxy_to, through_proxy


@pytest.fixture
def listener(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        yield conn


def notifications(conn: psycopg.Connection[Any], seconds: float) -> int:
    """How many notifications arrive within ``seconds``."""
    deadline = time.monotonic() + seconds
    count = 0
    while (left := deadline - time.monotonic()) > 0:
        count += sum(1 for _ in conn.notifies(timeout=left, stop_after=1))
    return count


def post(client: FlaskClient, event: dict[str, Any]) -> Any:
    body = encode(event)
    return client.post(
        "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
    )


def test_a_queued_receipt_wakes_listening_workers(
    client: FlaskClient, listener: psycopg.Connection[Any]
) -> None:
    """A new pending row is followed by a NOTIFY on the outbox channel."""
    assert post(client, stripe_events.event()).json["outcome"] == "queued"
    assert notifications(listener, 2.0) >= 1


def test_ignored_events_wake_nobody(client: FlaskClient, listener: psycopg.Connection[Any]) -> None:
    """An event that queues nothing sends no NOTIFY."""
    response = post(client, stripe_events.event(type="invoice.created"))
    assert response.json["outcome"] == "ignored"
    assert notifications(listener, 0.5) == 0


def test_a_burst_of_pokes_is_folded_and_the_last_one_is_honoured(
    database_url: str, listener: psycopg.Connection[Any]
) -> None:
    """200 pokes in a row cost far fewer NOTIFYs, and a poke after a quiet
    spell still gets its own."""
    wake_up = WakeUp(database_url, NOTIFY_CHANNEL)
    try:
        for _ in range(200):
            wake_up.poke()
        burst = notifications(listener, 1.0)
        assert 1 <= burst < 200
        wake_up.poke()
        assert notifications(listener, 1.0) == 1
    finally:
        wake_up.close()


def test_poke_never_blocks_on_a_dead_database_and_recovers(
    database_url: str, listener: psycopg.Connection[Any]
) -> None:
    """With PostgreSQL unreachable a poke returns at once (the NOTIFY is lost,
    the worker's polling covers it); once it is back, pokes wake workers again."""
    proxy = proxy_to(database_url)
    wake_up = WakeUp(through_proxy(database_url, proxy), NOTIFY_CHANNEL)
    try:
        proxy.refuse(True)
        started = time.monotonic()
        wake_up.poke()
        assert time.monotonic() - started < 0.1
        assert notifications(listener, 0.5) == 0
        proxy.refuse(False)
        wake_up.poke()
        assert notifications(listener, 2.0) == 1
    finally:
        wake_up.close()
        proxy.close()
