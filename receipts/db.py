"""Connections to PostgreSQL: a lazily opened pool for long-running processes.

Nothing connects at import time or when the pool object is made. The web
process must start while the database is down and answer 5xx until it is back,
so the pool opens without waiting and every borrow has a short timeout.

Behind PgBouncer in transaction mode (``RECEIPTS_DATABASE_POOLING=transaction``)
consecutive transactions of one client connection run on different server
connections, so a statement psycopg prepared on one is unknown on the next:
pools are then made with ``prepared_statements=False``. Nothing else here
keeps session state across transactions. Short-lived connections
(:func:`connect`) never prepare statements: a command runs each only a few times.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from receipts import queries


class DatabaseUnavailable(Exception):
    """No connection could be had, or the one we had broke mid-transaction."""


def describe_error(error: BaseException) -> str:
    """The first line of an error's message (libpq's run to several), or its type."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


Connection = psycopg.Connection[dict[str, Any]]


class Database:
    """A connection pool opened on first use, safe to create before forking."""

    def __init__(
        self,
        url: str,
        *,
        max_size: int = 8,
        timeout: float = 5.0,
        prepared_statements: bool = True,
    ) -> None:
        self.url = url
        self._max_size = max_size
        self._timeout = timeout
        # psycopg prepares a statement on the server from its 5th execution (the
        # default threshold); None never does.
        self._prepare_threshold = 5 if prepared_statements else None
        self._pool: ConnectionPool[Connection] | None = None
        self._lock = threading.Lock()

    def _open_pool(self) -> ConnectionPool[Connection]:
        with self._lock:
            if self._pool is None:
                pool: ConnectionPool[Connection] = ConnectionPool(
                    self.url,
                    min_size=1,
                    max_size=self._max_size,
                    timeout=self._timeout,
                    kwargs={
                        "row_factory": dict_row,
                        "connect_timeout": max(1, int(self._timeout)),
                        "prepare_threshold": self._prepare_threshold,
                    },
                    reconnect_timeout=0,
                    open=False,
                    name="receipts",
                )
                pool.open(wait=False)
                self._pool = pool
            return self._pool

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """Borrow a connection and run one transaction on it (commit on success)."""
        with self._borrowed() as conn, conn.transaction():
            yield conn

    @contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """Borrow a connection on which every statement commits on its own.

        Saves the BEGIN and COMMIT round trips when one statement does the work.
        """
        with self._borrowed() as conn:
            conn.autocommit = True
            try:
                yield conn
            finally:
                with suppress(psycopg.Error):
                    conn.autocommit = False

    @contextmanager
    def _borrowed(self) -> Iterator[Connection]:
        pool = self._open_pool()
        try:
            with pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise DatabaseUnavailable(f"no database connection within {self._timeout:g} s") from exc
        except psycopg.OperationalError as exc:
            raise DatabaseUnavailable(describe_error(exc)) from exc

    def ping(self) -> None:
        """Raise DatabaseUnavailable unless a trivial query succeeds (``health.sql``: ``ping``)."""
        with self.transaction() as conn:
            conn.execute(queries.load("health")["ping"])

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None


def connect(url: str, *, autocommit: bool = False) -> Connection:
    """One plain connection, for short-lived commands and LISTEN."""
    try:
        return psycopg.connect(
            url,
            row_factory=dict_row,
            autocommit=autocommit,
            connect_timeout=10,
            prepare_threshold=None,
        )
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(describe_error(exc)) from exc
