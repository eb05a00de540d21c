"""The pace of one worker's sends: the ``RECEIPTS_SEND_RATE`` cap and the provider's pauses.

Every sender thread asks :class:`RateLimiter` for a slot before its request.
Slots are spaced ``1 / rate`` seconds apart (no spacing when the rate is 0),
and none is given while a pause is on: a 429 or an exhausted rate-limit
window (see ``receipts.delivery.decisions``) pauses every send of the worker.
docs/architecture.md, "Retry delay and rate limits", describes both.
"""

from __future__ import annotations

import threading
import time


class RateLimiter:
    """Spaces sends to ``rate`` per second (0 = no cap) and pauses them after a 429."""

    def __init__(self, rate: float) -> None:
        self._interval = 1.0 / rate if rate > 0 else 0.0
        self._next_slot = 0.0
        self._paused_until = 0.0
        self._lock = threading.Lock()

    def pause(self, seconds: float) -> None:
        """No slot is given for ``seconds`` from now (a longer pause already on stays)."""
        with self._lock:
            self._paused_until = max(self._paused_until, time.monotonic() + seconds)

    def paused_for(self) -> float:
        """Seconds left of the current pause (0.0: none)."""
        with self._lock:
            return max(0.0, self._paused_until - time.monotonic())

    def acquire(self, deadline: float, halt: threading.Event) -> bool:
        """Wait for a send slot; False if none comes before ``deadline`` or on halt.

        ``deadline`` is a ``time.monotonic()`` value: the last moment the
        send may start.
        """
        while not halt.is_set():
            with self._lock:
                now = time.monotonic()
                start = max(now, self._next_slot, self._paused_until)
                if start > deadline:
                    return False
                if start <= now:
                    self._next_slot = now + self._interval
                    return True
            halt.wait(min(start - now, 0.25))
        return False

    def sendable_within(self, seconds: float) -> int | None:
        """How many sends fit into ``seconds`` at the capped rate (None: no cap)."""
        if self._interval == 0.0:
            return None
        return max(1, int(seconds / self._interval))
