"""The fleet's share of the provider's limit: one pace for every worker process.

A provider's rate limit belongs to the whole team: Resend's 5 requests/s
cover the receipts and the app's own mail (password resets, sign-in links)
alike. :class:`RateLimiter` paces one process; :class:`FleetPace` paces them
all through the database (``send_pace``, one row per provider): before each
request a sender reserves the next start time no other process has taken
(``delivery.sql: reserve_send_slot``), one interval after the last. The
interval is ``(1 + RATE_MARGIN) / (RECEIPTS_SEND_SHARE * the provider's
limit)``, the limit its own ``ratelimit-limit`` header last stated to any
process (``delivery.sql: record_team_limit``; until one has, requests are not
spaced fleet-wide, only per process). So with the default share of 0.6, four
workers together use 3 of Resend's 5 requests/s and the app keeps the rest.
A 429 (or a window the provider says is used up) moves the fleet's next start
past the wait it asked for (``delivery.sql: hold_send_pace``): every process
backs off, not only the one that heard it.

The pace only ever delays a send. When the database cannot be reached the
process keeps its own pace and logs that it does. docs/architecture.md,
"The fleet's share of the provider's limit".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import psycopg

from receipts import queries
from receipts.db import Database, DatabaseUnavailable, describe_error
from receipts.delivery.pacing import RATE_MARGIN, RateLimiter
from receipts.logs import log_fields

log = logging.getLogger(__name__)

_Q = queries.load("delivery")


class FleetPace:
    """Start times for requests to one provider, shared by every worker process."""

    def __init__(
        self,
        database: Database,
        *,
        provider: str,
        share: float,
        limiter: RateLimiter,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if share <= 0:
            raise ValueError("a fleet pace needs a share above 0")
        self._database = database
        self._provider = provider
        self._limiter = limiter
        self._spacing = (1.0 + RATE_MARGIN) / share
        self._clock = clock
        self._heard_limit: float | None = None
        self._lock = threading.Lock()  # one limit write at a time

    def acquire(self, deadline: float, halt: threading.Event) -> bool:
        """Wait for this process's next start time; False when none is free before
        ``deadline`` (a value of the clock), or on halt."""
        max_wait = deadline - self._clock()
        if max_wait < 0 or halt.is_set():
            return False
        try:
            with self._database.autocommit() as conn:
                row = conn.execute(
                    _Q["reserve_send_slot"],
                    {
                        "provider": self._provider,
                        "spacing": self._spacing,
                        "max_wait": max_wait,
                    },
                ).fetchone()
        except (DatabaseUnavailable, psycopg.Error) as exc:
            log_fields(
                log,
                "could not reserve a send slot of the fleet; this worker keeps its own pace",
                logging.WARNING,
                error=describe_error(exc),
            )
            return True
        if row is None:
            self._pause_for_the_fleet()
            return False
        wait = float(row["wait_seconds"])
        if wait > 0:
            halt.wait(wait)
        return not halt.is_set()

    def _pause_for_the_fleet(self) -> None:
        """No slot before the deadline: this process's pace pauses until the fleet's
        next free one, so its dispatcher waits (or a drain run ends) instead of
        claiming rows it could not send."""
        try:
            with self._database.autocommit() as conn:
                row = conn.execute(_Q["send_pace_wait"], {"provider": self._provider}).fetchone()
        except (DatabaseUnavailable, psycopg.Error):
            return
        if row is not None and self._limiter.pause(float(row["wait_seconds"])):
            log_fields(
                log,
                "the fleet's sends are taken or held; this worker waits",
                wait_seconds=round(float(row["wait_seconds"]), 3),
            )

    def heard(self, *, limit_per_second: float | None, pause_seconds: float) -> None:
        """What an answer said about the limit: the provider's stated limit for every
        process's next reservation, and a wait it asked for that every process keeps."""
        try:
            if limit_per_second is not None and limit_per_second > 0:
                self._record_limit(limit_per_second)
            if pause_seconds > 0:
                with self._database.autocommit() as conn:
                    conn.execute(
                        _Q["hold_send_pace"],
                        {"provider": self._provider, "pause_seconds": pause_seconds},
                    )
        except (DatabaseUnavailable, psycopg.Error) as exc:
            log_fields(
                log,
                "could not share the provider's limit with the fleet; only this worker follows it",
                logging.WARNING,
                error=describe_error(exc),
            )

    def _record_limit(self, limit_per_second: float) -> None:
        with self._lock:
            if self._heard_limit == limit_per_second:
                return
            with self._database.autocommit() as conn:
                conn.execute(
                    _Q["record_team_limit"],
                    {"provider": self._provider, "team_limit": limit_per_second},
                )
            self._heard_limit = limit_per_second
