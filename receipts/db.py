"""Connections to PostgreSQL: a lazily opened pool for long-running processes.

Nothing connects at import time or when the pool object is made. The web
process must start while the database is down and answer 5xx until it is back,
so the pool opens without waiting and every borrow has a short timeout.

Behind PgBouncer in transaction mode (``RECEIPTS_DATABASE_POOLING=transaction``)
consecutive transactions of one client connection run on different server
connections, so a statement psycopg prepared on one is unknown on the next:
pools are then made with ``prepared_statements=False``. A pool that finds
itself behind such a pooler without that setting (the server refuses a
statement name: taken, or unknown) stops preparing at once, says what to set,
and answers that one borrow as unavailable (a webhook gets 503 and is sent
again); every later borrow works. Nothing else here
keeps session state across transactions. Short-lived connections
(:func:`connect`) never prepare statements: a command runs each only a few times.
"""

from __future__ import annotations

import functools
import logging
import os
import select
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
import psycopg.errors
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from receipts import deadlines, queries

log = logging.getLogger(__name__)

# A dead path without a reset (a hung server or pooler, a middlebox that still
# ACKs) must not hold a caller: the kernel gives up on data unacknowledged this
# long, keepalives find an idle peer gone, and a statement past its time limit is
# cancelled, then its socket shut if the cancel did not end it.
TCP_OPTIONS: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,  # milliseconds
}
# How long a cancel request may take to be delivered, and how long after the
# time limit a statement whose cancel did not end it gets its socket shut.
CANCEL_SECONDS = 1.0
SEVER_AFTER_SECONDS = 1.0


class DatabaseUnavailable(Exception):
    """The database cannot do this work now; retrying later may succeed.

    ``reason`` is a short word safe to show anyone (``/readyz``): ``unreachable``
    (no connection, or it broke), ``read_only`` (the server refuses writes, as a
    standby does after a failover), ``timeout`` (a lock or statement took
    longer than allowed), ``disk_full``, ``out_of_memory`` or
    ``insufficient_resources`` (the server lacks what the work needs, SQLSTATE
    class 53), ``write_failed`` (a write did not commit for another reason).
    The message, for logs, may carry the driver's text.
    """

    def __init__(self, message: str, reason: str = "unreachable") -> None:
        super().__init__(message)
        self.reason = reason


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
        work_timeout: float | None = None,
        prepared_statements: bool = True,
    ) -> None:
        self.url = url
        self._max_size = max_size
        self._timeout = timeout
        self._work_timeout = work_timeout
        # psycopg prepares a statement on the server from its 5th execution (the
        # default threshold); None never does.
        self._prepare_threshold = 5 if prepared_statements else None
        self._pool: ConnectionPool[Connection] | None = None
        self._lock = threading.Lock()
        self._probe_refused = False  # said once: the role may not write the readiness probe

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
                        **TCP_OPTIONS,
                    },
                    configure=durable_commits,
                    # Keep reconnecting (after 1 s, 2 s, 4 s…) for as long as a
                    # borrow may wait: a request that began waiting during a blip is
                    # served once the database is back, not answered 503 at the end.
                    reconnect_timeout=self._timeout,
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
            conn = self._live_connection(pool)
            try:
                # as pool.connection(): commit, or roll back on error
                with conn, self._time_limit(conn):
                    yield conn
            finally:
                pool.putconn(conn)
        except PoolTimeout as exc:
            raise DatabaseUnavailable(f"no database connection within {self._timeout:g} s") from exc
        except (
            psycopg.errors.DuplicatePreparedStatement,
            psycopg.errors.InvalidSqlStatementName,
        ) as exc:
            self._stop_preparing()
            raise DatabaseUnavailable(describe_error(exc), "pooler_prepared_statements") from exc
        except psycopg.errors.ReadOnlySqlTransaction as exc:
            raise DatabaseUnavailable(describe_error(exc), "read_only") from exc
        except psycopg.errors.UndefinedTable as exc:
            raise DatabaseUnavailable(not_migrated(exc), "not_migrated") from exc
        except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable) as exc:
            limit = f" (limit {self._work_timeout:g} s)" if self._work_timeout else ""
            raise DatabaseUnavailable(describe_error(exc) + limit, "timeout") from exc
        except psycopg.OperationalError as exc:
            raise DatabaseUnavailable(describe_error(exc), unavailable_reason(exc)) from exc

    def _stop_preparing(self) -> None:
        """Behind a transaction pooler the setting did not name: prepare nothing from now on."""
        if self._prepare_threshold is None:
            return
        self._prepare_threshold = None
        log.warning(
            "DATABASE_URL goes through a transaction pooler (a prepared statement's name "
            "was taken or unknown): prepared statements are off for this process; set "
            "RECEIPTS_DATABASE_POOLING=transaction (and DATABASE_DIRECT_URL for the loop worker)"
        )

    @contextmanager
    def _time_limit(self, conn: Connection) -> Iterator[None]:
        """Cancel what runs on ``conn`` once the work timeout has passed; shut its
        socket :data:`SEVER_AFTER_SECONDS` later if it still runs.

        A lock held by a long migration or a stuck transaction would otherwise
        hold a webhook (and its thread) for as long as it lasts, past the
        sender's own timeout. The cancel comes from this process's deadline
        thread (:mod:`receipts.deadlines`), so the usual borrow costs no round
        trip, unlike ``SET LOCAL lock_timeout`` in a transaction around the
        one-statement ingest; it works through PgBouncer, which forwards
        cancel requests. The cancelled statement fails with QueryCanceled.
        A cancel travels a new connection on the same path: when that path is
        dead the cancel never arrives, and shutting the socket is what ends the
        wait (an OperationalError: the connection is gone, the pool replaces it).
        """
        if not self._work_timeout:
            yield
            return
        cancel = functools.partial(conn.cancel_safe, timeout=CANCEL_SECONDS)
        with (
            deadlines.after(self._work_timeout, cancel),
            deadlines.after(self._work_timeout + SEVER_AFTER_SECONDS, lambda: sever(conn)),
        ):
            yield

    def _live_connection(self, pool: ConnectionPool[Connection]) -> Connection:
        """A pooled connection the server has not closed meanwhile.

        After a database restart every connection the pool kept is dead, and
        each would fail one request before the pool noticed. Closed ones are
        handed back (the pool replaces them) and the next is tried, within the
        one borrow timeout.
        """
        deadline = time.monotonic() + self._timeout
        while True:
            conn = pool.getconn(timeout=max(0.001, deadline - time.monotonic()))
            if still_open(conn):
                conn.prepare_threshold = self._prepare_threshold
                return conn
            conn.close()
            pool.putconn(conn)

    def check_ready(self, migration_versions: Sequence[int] = ()) -> None:
        """Raise DatabaseUnavailable unless the database answers, accepts writes and has
        every migration in ``migration_versions`` applied.

        ``health.sql: accepts_writes`` reads no table: a standby, or a server
        set to read-only transactions, answers false. A deploy whose release
        phase has not migrated yet is not ready either.
        """
        health = queries.load("health")
        with self.transaction() as conn:
            row = conn.execute(health["accepts_writes"]).fetchone()
            try:
                with conn.transaction():
                    applied = conn.execute(
                        health["migrations_applied"], {"versions": list(migration_versions)}
                    ).fetchone()
            except psycopg.errors.InsufficientPrivilege:
                # A web role granted before this check existed: it cannot tell, so
                # it does not hold the deploy back (rerun sql/roles to have it).
                applied = {"applied": len(set(migration_versions))}
        if not (row and row["writable"]):
            raise DatabaseUnavailable("the database accepts no writes", "read_only")
        if applied is None or applied["applied"] < len(set(migration_versions)):
            raise DatabaseUnavailable(
                "migrations are pending: run `receipts migrate`", "not_migrated"
            )

    def probe_write(self) -> None:
        """Raise DatabaseUnavailable unless one small write commits.

        ``health.sql: record_write_probe`` updates the one row of
        ``readiness_probe`` in a statement of its own (autocommit: no session
        state, so it works behind a transaction pooler). A server that answers
        reads but cannot commit (a full disk, out of memory, read-only) is not
        ready. A web role granted before the probe table existed cannot write
        it: that says nothing about the database, so it does not hold the
        deploy back (rerun sql/roles to have the check).
        """
        try:
            with self.autocommit() as conn:
                conn.execute(queries.load("health")["record_write_probe"])
        except psycopg.errors.InsufficientPrivilege:
            if not self._probe_refused:
                self._probe_refused = True
                log.warning("this role may not write readiness_probe: rerun sql/roles")
        except psycopg.Error as exc:
            raise DatabaseUnavailable(describe_error(exc), "write_failed") from exc

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None


# The server lacks what the work needs (SQLSTATE class 53), in words safe to show anyone.
_RESOURCE_REASONS = {"53100": "disk_full", "53200": "out_of_memory"}


def unavailable_reason(error: psycopg.OperationalError) -> str:
    """The short reason for an operational error: what the server lacks, else unreachable."""
    state = error.sqlstate or ""
    if state.startswith("53"):
        return _RESOURCE_REASONS.get(state, "insufficient_resources")
    return "unreachable"


def not_migrated(error: psycopg.Error) -> str:
    """What to do about a table that is not there: the schema was never migrated."""
    return f"the database is not migrated ({describe_error(error)}): run `receipts migrate`"


def still_open(conn: Connection) -> bool:
    """False if the server closed this idle connection since its last use.

    An idle connection has nothing to read: a server that restarted, or a
    network path that was reset, leaves a goodbye or an end of file that
    makes the socket readable. Only then does a round trip decide, so the
    usual borrow costs no round trip.
    """
    if conn.closed:
        return False
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    if not poller.poll(0):
        return True
    try:
        ConnectionPool.check_connection(conn)
    except psycopg.Error:
        return False
    return True


def sever(conn: Connection) -> None:
    """Shut ``conn``'s socket under whatever waits on it: the wait ends at once with an
    OperationalError, whatever the network does (a duplicate, so libpq's own descriptor
    is never closed under it)."""
    with suppress(OSError, psycopg.Error):
        duplicate = socket.socket(fileno=os.dup(conn.pgconn.socket))
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        finally:
            duplicate.close()


def connect(url: str, *, autocommit: bool = False) -> Connection:
    """One plain connection, for short-lived commands and LISTEN."""
    try:
        conn = psycopg.connect(
            url,
            row_factory=dict_row,
            autocommit=autocommit,
            connect_timeout=10,
            prepare_threshold=None,
            **TCP_OPTIONS,
        )
        durable_commits(conn)
        return conn
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(describe_error(exc)) from exc


def durable_commits(conn: Connection) -> None:
    """Make every commit of ``conn`` wait for the disk.

    A database (or a managed offering) set to ``synchronous_commit = off``
    answers COMMIT before the row is on disk: a webhook answered 200 could lose
    its row in a crash, and Stripe would not send it again. The session setting
    wins over the database's. The connection is left as it was found: outside
    a transaction.
    """
    autocommit = conn.autocommit
    conn.autocommit = True
    try:
        conn.execute(queries.load("health")["durable_commits"])
    finally:
        conn.autocommit = autocommit
