"""Crash points of ingest, on a real gunicorn and a real PostgreSQL.

Faults come from outside the product: a SIGKILL sent to the gunicorn workers,
or a TCP proxy between gunicorn and PostgreSQL that resets connections when a
given byte pattern passes. Every case ends with the same two checks: nothing
lost (each paid invoice has its outbox row) and nothing doubled (one row per
invoice, whatever Stripe redelivered).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
import requests

from tests import stripe_events
from tests.real_processes import Gunicorn, web_environ
from tests.stripe_events import TEST_SECRET, sign
from tests.tcp_proxy import TcpProxy, Verdict, through_proxy

Row = dict[str, Any]
Db = psycopg.Connection[Row]

# Ingest is one autocommit statement (ingest.sql's ``ingest_event``, found by the
# name comment it carries to the server); the first ReadyForQuery ("idle") that
# follows it means the server has committed it and is waiting for the client.
INGEST_SQL = b"-- name: ingest_event\n"
READY_IDLE = b"Z\x00\x00\x00\x05I"


def after_ingest_commits(proxy: TcpProxy, action: Callable[[], Verdict]) -> threading.Event:
    """Run ``action`` once the ingest statement has committed, before gunicorn hears."""
    return proxy.on_answer_to(INGEST_SQL, READY_IDLE, action)


def deliver(server: Gunicorn, event: dict[str, Any], timeout: float = 10) -> requests.Response:
    """POST one event the way Stripe does: raw JSON body, fresh signature."""
    body = json.dumps(event).encode()
    return requests.post(
        server.url + "/webhooks/stripe",
        data=body,
        headers={"Stripe-Signature": sign(body, TEST_SECRET), "Content-Type": "application/json"},
        timeout=timeout,
    )


def outbox(db: Db) -> list[Row]:
    return db.execute(
        "SELECT message_key, invoice_id, status FROM email_outbox ORDER BY invoice_id"
    ).fetchall()


def recorded_events(db: Db) -> list[Row]:
    return db.execute(
        "SELECT event_id, outcome, deliveries FROM stripe_events ORDER BY event_id"
    ).fetchall()


def assert_untouched_since_insert(db: Db) -> None:
    """No redelivery rewrote an outbox row (no second insert, no update)."""
    changed = db.execute(
        "SELECT count(*) AS n FROM email_outbox WHERE updated_at <> created_at"
    ).fetchone()
    assert changed == {"n": 0}


def test_web_killed_after_commit_before_answering_redelivery_is_a_duplicate(
    database_url: str, db: Db, db_proxy: TcpProxy, start_gunicorn: type[Gunicorn]
) -> None:
    """The commit is durable but Stripe never hears 200: the proxy between
    gunicorn and PostgreSQL sees the server report the ingest statement done
    (committed, ready for the next query), SIGKILLs every gunicorn worker
    before that report is relayed, and resets the connection. Stripe's
    request fails, so Stripe redelivers; the redelivery is counted on the
    event and leaves the row as it was. One row, one receipt."""
    server = start_gunicorn(web_environ(through_proxy(database_url, db_proxy))).start()
    event = stripe_events.event(stripe_events.invoice(id="in_1KilledAfterCommit"))

    killed: list[int] = []

    def kill_web() -> Verdict:
        killed.extend(server.kill_workers())
        return "cut"

    fired = after_ingest_commits(db_proxy, kill_web)
    with pytest.raises(requests.ConnectionError):
        deliver(server, event)
    assert fired.is_set() and killed
    assert outbox(db) == [
        {
            "message_key": "platform/test/in_1KilledAfterCommit/invoice-paid",
            "invoice_id": "in_1KilledAfterCommit",
            "status": "pending",
        }
    ]

    server.wait_until_serving()  # the master has started fresh workers
    redelivery = deliver(server, event)
    assert redelivery.status_code == 200
    assert redelivery.json()["outcome"] == "queued"  # an event keeps its first outcome
    assert len(outbox(db)) == 1
    assert recorded_events(db) == [{"event_id": event["id"], "outcome": "queued", "deliveries": 2}]
    assert_untouched_since_insert(db)


@pytest.mark.parametrize("committed", [False, True], ids=["before-statement", "unacknowledged"])
def test_database_connection_cut_during_ingest_leaves_nothing_half_written(
    database_url: str,
    db: Db,
    db_proxy: TcpProxy,
    start_gunicorn: type[Gunicorn],
    committed: bool,
) -> None:
    """The connection to PostgreSQL is reset as the ingest statement is sent
    (it never reaches the server), or after the server committed it but
    before gunicorn heard. Stripe gets 503 and retries; the statement is all
    or nothing (never an event row without its outbox row), and the retry ends
    with exactly one row: inserted by the retry when nothing was committed, or
    found and left alone (the event counting a second delivery) when it was."""
    server = start_gunicorn(web_environ(through_proxy(database_url, db_proxy))).start()
    event = stripe_events.event(stripe_events.invoice(id="in_1DatabaseCut"))
    if committed:
        fired = after_ingest_commits(db_proxy, lambda: "cut")
    else:
        fired = db_proxy.on_client_bytes(INGEST_SQL, lambda: "cut")

    first = deliver(server, event)
    assert fired.is_set()
    assert first.status_code == 503
    rows_after_cut = (len(outbox(db)), len(recorded_events(db)))
    assert rows_after_cut == ((1, 1) if committed else (0, 0))

    retry = deliver(server, event)
    assert retry.status_code == 200
    assert retry.json()["outcome"] == "queued"
    assert [row["invoice_id"] for row in outbox(db)] == ["in_1DatabaseCut"]
    [recorded] = recorded_events(db)
    assert recorded["deliveries"] == (2 if committed else 1)
    assert_untouched_since_insert(db)


# In-process: tests/db/test_web.py (503 while the database is down) and
# tests/db/test_pool_recovery.py (cut connections replaced before use).
@pytest.mark.slow
def test_database_unreachable_answers_503_then_recovers_without_a_restart(
    database_url: str, db: Db, db_proxy: TcpProxy, start_gunicorn: type[Gunicorn]
) -> None:
    """PostgreSQL goes away (every connection reset, new ones refused, as in a
    restart): webhooks answer 503 and store nothing, /readyz says the database
    is failing; once it is back the same processes, without a restart, store
    the very next redelivery (no pooled connection cut meanwhile is used)."""
    server = start_gunicorn(web_environ(through_proxy(database_url, db_proxy))).start()
    warm = deliver(server, stripe_events.event())
    assert warm.status_code == 200

    db_proxy.refuse(True)
    db_proxy.cut()
    event = stripe_events.event(stripe_events.invoice(id="in_1WhileDown"))
    assert deliver(server, event).status_code == 503
    ready = requests.get(server.url + "/readyz", timeout=10)
    assert ready.status_code == 503 and ready.json()["failing"] == "database"

    db_proxy.refuse(False)
    # Connections cut during the outage are noticed before use and replaced:
    # the first delivery and the first readiness check after it succeed.
    assert retry_until_ok(lambda: deliver(server, event).status_code) == 1
    assert retry_until_ok(lambda: requests.get(server.url + "/readyz", timeout=10).status_code) == 1
    assert "in_1WhileDown" in [row["invoice_id"] for row in outbox(db)]
    assert len(outbox(db)) == 2


def retry_until_ok(call: Callable[[], int], attempts: int = 10) -> int:
    """Call until it answers 200; return how many calls that took."""
    for attempt in range(1, attempts + 1):
        if call() == 200:
            return attempt
        time.sleep(0.2)
    raise AssertionError(f"no 200 after {attempts} attempts")


def test_redelivery_storm_of_200_concurrent_deliveries_makes_20_rows(
    database_url: str, db: Db, start_gunicorn: type[Gunicorn]
) -> None:
    """20 paid invoices, each event delivered 10 times, all 200 deliveries in
    flight at once against gunicorn (2 workers x 4 threads, so they queue): every
    delivery gets 200, there are exactly 20 rows, and each event counts 10."""
    server = start_gunicorn(web_environ(database_url)).start()
    events = [stripe_events.event(stripe_events.invoice(id=f"in_1Storm{n:02d}")) for n in range(20)]
    deliveries = [event for event in events for _ in range(10)]
    random.Random(7).shuffle(deliveries)

    with ThreadPoolExecutor(max_workers=64) as pool:
        statuses = list(pool.map(lambda event: deliver(server, event).status_code, deliveries))

    assert statuses == [200] * 200
    rows = outbox(db)
    assert sorted(row["invoice_id"] for row in rows) == sorted(
        event["data"]["object"]["id"] for event in events
    )
    assert {row["status"] for row in rows} == {"pending"}
    assert [row["deliveries"] for row in recorded_events(db)] == [10] * 20
