"""Wake idle ``receipts worker --loop`` processes after new rows are committed.

A NOTIFY inside the ingest transaction would make every webhook commit take
PostgreSQL's global notification lock until its commit record is flushed, so
concurrent webhooks could no longer share a disk flush: measured at 16
concurrent deliveries, ingest commits dropped from about 3,000/s to 600-800/s.
Instead, after its commit, ingest calls :meth:`WakeUp.poke`, and one
background thread per process sends the NOTIFY on its own connection. Pokes
that arrive while a NOTIFY is being sent are folded into one more NOTIFY, so
every commit is followed by a NOTIFY that starts after it. A NOTIFY lost to a
database error only delays the row until the worker's next poll. The
statement is ``notify_workers`` in ``receipts/queries/ingest.sql``.
"""

from __future__ import annotations

import logging
import os
import threading

import psycopg

from receipts import queries
from receipts.db import Connection, DatabaseUnavailable, connect, describe_error
from receipts.logs import log_fields

log = logging.getLogger(__name__)

# The thread and its connection go away after this long without a poke.
IDLE_SECONDS = 10.0


class WakeUp:
    """Sends ``NOTIFY channel`` soon after each :meth:`poke`, folding bursts into one."""

    def __init__(self, database_url: str, channel: str) -> None:
        self._url = database_url
        self._channel = channel
        self._pending = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        # A forked child (a gunicorn worker) inherits the object but not the thread.
        os.register_at_fork(after_in_child=self._forget_thread)

    def poke(self) -> None:
        """Ask for a NOTIFY that starts after this call; never blocks on the database."""
        # Already asked and not yet taken: the thread clears the flag before it
        # sends, so that NOTIFY starts after this call too.
        if not self._pending.is_set():
            self._pending.set()
        if self._thread is not None or self._closed:
            return
        with self._lock:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="wake-up", daemon=True)
                self._thread.start()

    def _forget_thread(self) -> None:
        self._thread = None
        self._lock = threading.Lock()
        self._pending = threading.Event()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        self._pending.set()
        if thread is not None:
            thread.join(timeout=5)

    def _run(self) -> None:
        conn: Connection | None = None
        try:
            while self._pending.wait(IDLE_SECONDS) and not self._closed:
                self._pending.clear()
                conn = self._notify(conn)
        finally:
            if conn is not None:
                conn.close()
            with self._lock:
                self._thread = None
            if self._pending.is_set() and not self._closed:
                self.poke()  # a poke raced with the idle exit

    def _notify(self, conn: Connection | None) -> Connection | None:
        try:
            if conn is None or conn.closed:
                conn = connect(self._url, autocommit=True)
            conn.execute(queries.load("ingest")["notify_workers"], {"channel": self._channel})
            return conn
        except (DatabaseUnavailable, psycopg.Error) as exc:
            log_fields(
                log,
                "could not wake workers; they will find the rows when they poll",
                logging.WARNING,
                error=describe_error(exc),
            )
            if conn is not None:
                conn.close()
            return None
