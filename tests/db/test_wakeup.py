"""Waking the workers after ingest commits: a NOTIFY sent after the commit, never inside it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from receipts import queries
from receipts.ingest.wakeup import WakeUp
from receipts.vocabulary import NOTIFY_CHANNEL
from tests import stripe_events
from tests.stripe_events import TEST_SECRET, encode, sign
from tests.tcp_proxy import Verdict, proxy_to, through_proxy

# The statement's name line, as it passes through the proxy.
NOTIFY_STATEMENT = queries.load("ingest")["notify_workers"].splitlines()[0].encode()


@pytest.fixture
def listener(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        yield conn


def notifications(conn: psycopg.Connection[Any], seconds: float) -> int:
    """How many notifications arrive within ``seconds`` (to show that none comes)."""
    deadline = time.monotonic() + seconds
    count = 0
    while (left := deadline - time.monotonic()) > 0:
        count += sum(1 for _ in conn.notifies(timeout=left, stop_after=1))
    return count


def received(conn: psycopg.Connection[Any], expected: int = 1, timeout: float = 20.0) -> int:
    """How many notifications arrived once ``expected`` of them have (waited for up
    to ``timeout``). All of them are counted: two may come in one packet."""
    return sum(1 for _ in conn.notifies(timeout=timeout, stop_after=expected))


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
    assert received(listener) == 1


def test_ignored_events_wake_nobody(client: FlaskClient, listener: psycopg.Connection[Any]) -> None:
    """An event that queues nothing sends no NOTIFY."""
    response = post(client, stripe_events.event(type="invoice.created"))
    assert response.json["outcome"] == "ignored"
    assert notifications(listener, 0.5) == 0


def test_a_burst_of_pokes_is_folded_and_the_last_one_is_honoured(
    database_url: str, listener: psycopg.Connection[Any]
) -> None:
    """200 pokes while a NOTIFY is on its way cost one more NOTIFY, not 200, and a
    poke after a quiet spell still gets its own. (The first NOTIFY is held in a
    proxy until the pokes are done.)"""
    proxy = proxy_to(database_url)
    wake_up = WakeUp(through_proxy(database_url, proxy), NOTIFY_CHANNEL)
    sending, go_on = threading.Event(), threading.Event()

    def hold_the_first_notify() -> Verdict:
        sending.set()
        go_on.wait(10)
        return "forward"

    proxy.on_client_bytes(NOTIFY_STATEMENT, hold_the_first_notify)
    try:
        wake_up.poke()
        assert sending.wait(10)
        for _ in range(200):
            wake_up.poke()
        go_on.set()
        assert received(listener, 2) == 2
        assert notifications(listener, 0.5) == 0
        wake_up.poke()
        assert received(listener) == 1
    finally:
        go_on.set()
        wake_up.close()
        proxy.close()


def test_poke_never_blocks_on_a_dead_database_and_recovers(
    database_url: str, listener: psycopg.Connection[Any]
) -> None:
    """With PostgreSQL not answering at all (a connection to it hangs) a poke
    still returns (the NOTIFY is lost, the worker's polling covers it); once the
    database answers again, pokes wake workers again."""
    proxy = proxy_to(database_url)
    wake_up = WakeUp(through_proxy(database_url, proxy), NOTIFY_CHANNEL)
    try:
        proxy.silence(True)
        poking = threading.Thread(target=wake_up.poke)
        poking.start()
        poking.join(timeout=10)  # a poke that waited for the database would wait for ever
        assert not poking.is_alive()
        assert notifications(listener, 0.5) == 0
        proxy.silence(False)
        wake_up.poke()
        assert received(listener) == 1
    finally:
        wake_up.close()
        proxy.close()
