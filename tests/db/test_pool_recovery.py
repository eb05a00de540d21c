"""A pool's waiters are served once the database is back, not at the end of their wait.

The red team's finding: requests that began waiting during a sub-second outage
got 503 after the whole borrow timeout, because the pool gave up reconnecting
at the first refusal and grew again only when a new request came. The pool
now keeps trying for as long as a borrow may wait (``receipts/db.py``).
"""

from __future__ import annotations

import threading
from typing import Any

from receipts.db import Database
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
