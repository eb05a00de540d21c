"""Whether the database can commit a write, asked at most once every few seconds.

``/readyz`` is polled by load balancers and platform health checks, often
every second or two from several places. Each check that writes costs a
commit (a WAL flush), so the verdict of the write probe
(:meth:`receipts.db.Database.probe_write`) is kept for
:data:`VERDICT_SECONDS` in this process: a poll within that time reuses it,
whether it said ready or not, and the first poll after it asks again. The
clock is injected, so tests move time instead of waiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from receipts.db import Database, DatabaseUnavailable

# How long one verdict of the write probe stands.
VERDICT_SECONDS = 5.0


@dataclass(frozen=True)
class _Verdict:
    """One answer of the probe: when it was given and, if the write failed, why."""

    at: float
    reason: str | None = None  # None: the write committed
    message: str = ""


class WriteProbe:
    """The database's last answer to "can a write commit?", kept for a few seconds."""

    def __init__(
        self,
        database: Database,
        *,
        clock: Callable[[], float] = time.monotonic,
        verdict_seconds: float = VERDICT_SECONDS,
    ) -> None:
        self._database = database
        self._clock = clock
        self._verdict_seconds = verdict_seconds
        self._verdict: _Verdict | None = None
        # One probe at a time: polls arriving while it runs wait for its verdict.
        self._lock = threading.Lock()

    def check(self) -> None:
        """Raise DatabaseUnavailable (a fresh one) unless the current verdict is ready."""
        with self._lock:
            verdict = self._verdict
            if verdict is None or self._clock() - verdict.at >= self._verdict_seconds:
                verdict = self._verdict = self._ask()
        if verdict.reason is not None:
            raise DatabaseUnavailable(verdict.message, verdict.reason)

    def _ask(self) -> _Verdict:
        try:
            self._database.probe_write()
        except DatabaseUnavailable as exc:
            return _Verdict(at=self._clock(), reason=exc.reason, message=str(exc))
        return _Verdict(at=self._clock())
