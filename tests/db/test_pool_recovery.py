"""The pool against a database path that breaks: waiters served when it returns, no
wait without a bound when it goes silent.

The red team's finding: requests that began waiting during a sub-second outage
got 503 after the whole borrow timeout, because the pool gave up reconnecting
at the first refusal and grew again only when a new request came. The pool
now keeps trying for as long as a borrow may wait (``receipts/db.py``).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from receipts.db import Database, DatabaseUnavailable
from tests.helpers import wait_for
from tests.tcp_proxy import proxy_to, through_proxy


def test_a_borrow_waiting_through_an_outage_is_served_when_the_database_returns(
    database_url: str,
) -> None:
    """Every connection cut and new ones refused while a borrow waits (30 s allowed);
    after a refused reconnect the database comes back: the same borrow is served
    (before the fix the pool had stopped trying, and it waited out its 30 s)."""
    proxy = proxy_to(database_url)
    database = Database(through_proxy(database_url, proxy), max_size=1, timeout=30.0)
    served: list[Any] = []
    try:
        with database.autocommit() as conn:
            conn.execute("SELECT 1")
        proxy.refuse(True)
        proxy.cut()

        def borrow() -> None:
            with database.autocommit() as conn:
                served.append(conn.execute("SELECT 1 AS one").fetchone())

        waiter = threading.Thread(target=borrow, daemon=True)
        waiter.start()
        wait_for(lambda: proxy.connections_refused >= 1, 10, "a refused reconnect")
        proxy.refuse(False)
        waiter.join(timeout=40)
    finally:
        database.close()
        proxy.close()
    assert served == [{"one": 1}]


def test_a_statement_on_a_path_gone_silent_ends_soon_after_its_time_limit(
    database_url: str,
) -> None:
    """The path to the database stops answering without a reset (bytes ACKed, never
    delivered; a cancel request's new connection accepted, never answered): the
    statement is cancelled at its limit, and when the cancel cannot arrive its socket
    is shut, so the borrow fails as unavailable instead of waiting for ever (before,
    the test ran into pytest's timeout)."""
    proxy = proxy_to(database_url)
    database = Database(through_proxy(database_url, proxy), max_size=1, work_timeout=0.5)
    try:
        with database.autocommit() as conn:
            conn.execute("SELECT 1")
        proxy.stall(True)
        proxy.silence(True)
        with pytest.raises(DatabaseUnavailable), database.autocommit() as conn:
            conn.execute("SELECT 1")
    finally:
        proxy.close()  # first: the pool's reconnects then fail at once, and it closes
        database.close()
