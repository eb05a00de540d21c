"""LISTEN -> wake: a looping worker hears about new rows as soon as they are committed.

Ingest and review send a NOTIFY on ``receipts_outbox`` once a row is ready;
:class:`Listener` holds one connection that LISTENs (``delivery.sql:
listen``) and wakes the dispatcher for each notification, which then claims
at once. Notifications can be missed (while reconnecting) or folded
together, so the dispatcher also polls; this only makes it prompt.
docs/architecture.md, "Waking the workers", describes both sides.

LISTEN is session state: through PgBouncer in transaction mode it would be
forgotten as soon as its transaction ended, and no notification would ever
arrive. The listener therefore connects to ``DATABASE_DIRECT_URL`` when it is
set; without it, when ``RECEIPTS_DATABASE_POOLING=transaction`` says that
``DATABASE_URL`` goes through such a pooler, there is no listener and the worker
polls, which :func:`start_listener` says in the log.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg

from receipts import queries
from receipts.config import Settings
from receipts.db import DatabaseUnavailable, connect, describe_error
from receipts.logs import log_fields

log = logging.getLogger(__name__)

# How often the listening thread looks up from the connection to see if it must stop.
_CHECK_SECONDS = 0.5
# How long stop() waits for the thread.
_JOIN_SECONDS = 2.0


class Listener:
    """A thread calling ``wake()`` for NOTIFYs; reconnects after ``poll_seconds``."""

    def __init__(self, database_url: str, wake: Callable[[], None], *, poll_seconds: float) -> None:
        self._database_url = database_url
        self._wake = wake
        self._poll_seconds = poll_seconds
        self._finished = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="listen", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._finished.set()
        self._thread.join(timeout=_JOIN_SECONDS)

    def _listen(self) -> None:
        """Turn NOTIFYs into wake-ups; polling covers whatever this misses."""
        while not self._finished.is_set():
            try:
                with connect(self._database_url, autocommit=True) as conn:
                    conn.execute(queries.load("delivery")["listen"])
                    self._wake()  # rows may have arrived while we were not listening
                    while not self._finished.is_set():
                        for _ in conn.notifies(timeout=_CHECK_SECONDS):
                            self._wake()
            except (DatabaseUnavailable, psycopg.Error) as exc:
                log_fields(
                    log,
                    "listen connection lost; polling meanwhile",
                    logging.WARNING,
                    error=describe_error(exc),
                )
                self._finished.wait(self._poll_seconds)


def start_listener(
    settings: Settings, wake: Callable[[], None], poll_seconds: float
) -> Listener | None:
    """A started listener on a connection that can LISTEN, or None (and a log line saying so)."""
    url = settings.database_direct_url
    if url is None and not settings.prepared_statements:
        log_fields(
            log,
            "LISTEN needs a direct connection and DATABASE_URL goes through a transaction "
            "pooler; set DATABASE_DIRECT_URL to be woken at once. Polling meanwhile",
            logging.WARNING,
            poll_seconds=poll_seconds,
        )
        return None
    listener = Listener(url or settings.database_url or "", wake, poll_seconds=poll_seconds)
    listener.start()
    log_fields(
        log,
        "listening for new receipts",
        through="DATABASE_DIRECT_URL" if settings.database_direct_url else "DATABASE_URL",
    )
    return listener
