"""The sending pause after a quota answer, recorded so every worker process sees it.

A ``daily_quota_exceeded`` or ``monthly_quota_exceeded`` answer means no
send through that provider can succeed until the quota resets. The worker
that got it records a pause in ``sending_pauses`` (``delivery.sql:
record_sending_pause``: one row per provider, a pause still on is only ever
lengthened) and every worker reads it before it claims (``delivery.sql:
current_sending_pause``): a drain run then stops with exit code 4, a
``--loop`` worker waits, holding its senders (``RateLimiter.hold``), and
looks again every poll interval, so an operator's ``receipts worker
--resume`` (``delivery.sql: clear_sending_pause``) or the end of the pause
sets it sending again. ``receipts status`` reports the pause
(``reports.sql: active_sending_pauses``). docs/architecture.md, "The sending
pause", describes the whole.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from receipts import queries
from receipts.db import Connection, Database, DatabaseUnavailable, describe_error
from receipts.delivery.decisions import QuotaPause
from receipts.delivery.pacing import RateLimiter
from receipts.formatting import utc
from receipts.logs import log_fields
from receipts.vocabulary import PauseReason

log = logging.getLogger(__name__)

_Q = queries.load("delivery")

_QUOTA_WORDS: dict[str, str] = {
    PauseReason.DAILY_QUOTA: "daily quota",
    PauseReason.MONTHLY_QUOTA: "monthly quota",
}


@dataclass(frozen=True, kw_only=True)
class SendingPause:
    """No send through ``provider`` before ``paused_until``."""

    provider: str
    reason: PauseReason
    paused_at: datetime
    paused_until: datetime
    worker_id: str
    seconds_left: float  # as of the database's clock when it was read

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> SendingPause:
        return cls(
            provider=row["provider"],
            reason=PauseReason(row["reason"]),
            paused_at=row["paused_at"],
            paused_until=row["paused_until"],
            worker_id=row["worker_id"],
            seconds_left=max(0.0, float(row["seconds_left"])),
        )

    def line(self) -> str:
        """``sending paused: daily quota until 2026-12-01 00:00 UTC``."""
        return f"sending paused: {describe_reason(self.reason)} until {utc(self.paused_until)}"

    def same_as(self, other: SendingPause | None) -> bool:
        """The same pause, give or take the minute two workers' answers differ by."""
        return (
            other is not None
            and other.reason == self.reason
            and abs((other.paused_until - self.paused_until).total_seconds()) < 60
        )


def describe_reason(reason: str) -> str:
    """``daily quota`` for ``daily_quota_exceeded``; the word itself if unknown."""
    return _QUOTA_WORDS.get(reason, reason)


def record_pause(
    conn: Connection, provider: str, quota: QuotaPause, worker_id: str
) -> SendingPause:
    """Pause ``provider`` for ``quota.seconds``; returns the pause now in force."""
    row = conn.execute(
        _Q["record_sending_pause"],
        {
            "provider": provider,
            "reason": quota.reason,
            "pause_seconds": max(1.0, quota.seconds),
            "worker_id": worker_id,
        },
    ).fetchone()
    assert row is not None
    return SendingPause.from_row(row)


def current_pause(conn: Connection, provider: str) -> SendingPause | None:
    row = conn.execute(_Q["current_sending_pause"], {"provider": provider}).fetchone()
    return SendingPause.from_row(row) if row is not None else None


def clear_pause(conn: Connection, provider: str) -> SendingPause | None:
    """Lift the pause (the plan was upgraded); returns the pause that was in force."""
    row = conn.execute(_Q["clear_sending_pause"], {"provider": provider}).fetchone()
    return SendingPause.from_row(row) if row is not None else None


class PauseGate:
    """The pause as one worker sees it: read again at most every ``recheck_seconds``,
    recorded at once on a quota answer, and mirrored as a hold on the send pace."""

    def __init__(
        self,
        database: Database,
        limiter: RateLimiter,
        *,
        provider: str,
        worker_id: str,
        recheck_seconds: float,
    ) -> None:
        self._database = database
        self._limiter = limiter
        self._provider = provider
        self._worker_id = worker_id
        self._recheck_seconds = recheck_seconds
        self._current: SendingPause | None = None
        self._checked_at = float("-inf")
        # The dispatcher reads, sender threads record: one at a time, so a read
        # that saw no pause never lifts the hold a quota answer has just set.
        self._lock = threading.Lock()

    def current(self) -> SendingPause | None:
        """The pause in force, from the database when the last look is old enough."""
        with self._lock:
            if time.monotonic() - self._checked_at < self._recheck_seconds:
                return self._current
            self._checked_at = time.monotonic()
            try:
                with self._database.transaction() as conn:
                    found = current_pause(conn, self._provider)
            except (DatabaseUnavailable, psycopg.Error) as exc:
                log_fields(
                    log,
                    "could not read the sending pause",
                    logging.WARNING,
                    error=describe_error(exc),
                )
                return self._current
            self._adopt(found)
            return self._current

    def record(self, quota: QuotaPause) -> SendingPause | None:
        """A quota answer: pause every worker (here at once, elsewhere at their next look)."""
        self._limiter.hold(quota.seconds)
        with self._lock:
            try:
                with self._database.transaction() as conn:
                    pause = record_pause(conn, self._provider, quota, self._worker_id)
            except (DatabaseUnavailable, psycopg.Error) as exc:
                log_fields(
                    log,
                    "could not record the sending pause; only this worker pauses",
                    logging.ERROR,
                    reason=quota.reason,
                    error=describe_error(exc),
                )
                return None
            self._checked_at = time.monotonic()
            self._adopt(pause, asked=quota.asked)
            return pause

    def _adopt(self, pause: SendingPause | None, *, asked: float | None = None) -> None:
        before, self._current = self._current, pause
        if pause is None:
            self._limiter.release()
            if before is not None:
                log_fields(log, "sending resumed", provider=self._provider)
            return
        self._limiter.release()
        self._limiter.hold(pause.seconds_left)
        if not pause.same_as(before):
            log_fields(
                log,
                pause.line(),
                logging.WARNING,
                provider=self._provider,
                reason=pause.reason,
                asked_seconds=None if asked is None else _whole(asked),
                recorded_by=pause.worker_id,
            )


def _whole(seconds: float) -> int | str:
    """Seconds for a log line; ``inf`` (a provider asking forever) as the word."""
    return round(seconds) if math.isfinite(seconds) else "inf"
