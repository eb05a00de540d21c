"""The pace of one worker's sends, shared by all its sender threads, and of a row's retries.

Every sender thread asks :class:`RateLimiter` for a slot before its request.
Slots are spaced evenly, a little wider than the rate
(:data:`RATE_MARGIN`): ``1.05 / RECEIPTS_SEND_RATE`` seconds apart (no
spacing when the rate is 0), and never closer than the provider's own limit
allows once an answer has said it (``ratelimit-limit``, see
:meth:`RateLimiter.follow_provider_rate`). No slot is given while a pause is
on: a 429, or a rate-limit window of more than a second that the provider
says is used up (``ratelimit-remaining: 0`` until ``ratelimit-reset``), pauses
every send of the worker (``receipts.delivery.decisions`` says how long, capped
at ``RECEIPTS_RETRY_MAX_SECONDS``). A *hold* is a pause that can be lifted
early: the quota pause, which an operator may clear. :func:`retry_delay` is
how long a row waits before its next attempt. docs/architecture.md, "Retry
delay and rate limits", describes the whole.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable

# Requests are spaced this much wider than the rate: our clock and the
# provider's differ by the network's jitter (a new connection's first request
# arrives later than the next ones), and a request that arrives early in the
# provider's window is refused. 5 % leaves 50 ms at 5 requests/s. Measured in
# bench/pacing.py: 200 sends against a 5 requests/s limit, no 429, 1.05 x the
# 40 s the limit allows.
RATE_MARGIN = 0.05


class RateLimiter:
    """Spaces sends to ``rate`` per second (0 = no cap) and pauses them on request.

    Slots, pauses and deadlines are read on ``clock`` (``time.monotonic``; a
    test passes a clock it moves itself). A sender waiting for a slot looks at
    the clock again at least every quarter of a second.
    """

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._configured_interval = (1.0 + RATE_MARGIN) / rate if rate > 0 else 0.0
        self._interval = self._configured_interval
        self._next_slot = 0.0
        self._paused_until = 0.0
        self._held_until = 0.0
        self._lock = threading.Lock()

    @property
    def interval(self) -> float:
        """Seconds between two slots now (0.0: no spacing)."""
        with self._lock:
            return self._interval

    def follow_provider_rate(self, requests_per_second: float) -> None:
        """Never send faster than the provider allows (with the same margin); a
        higher provider limit never raises the configured cap, and with no cap
        (rate 0) the provider's limit is left to its 429s."""
        if requests_per_second <= 0 or self._configured_interval == 0.0:
            return
        provider_interval = (1.0 + RATE_MARGIN) / requests_per_second
        with self._lock:
            self._interval = max(self._configured_interval, provider_interval)

    def pause(self, seconds: float) -> bool:
        """No slot is given for ``seconds`` from now (a longer pause already on stays).

        True when this extended the pause (a new wait worth a log line).
        """
        with self._lock:
            until = self.clock() + seconds
            if until <= self._paused_until:
                return False
            self._paused_until = until
            return True

    def hold(self, seconds: float) -> None:
        """No slot for ``seconds``, unless :meth:`release` lifts the hold first."""
        with self._lock:
            self._held_until = max(self._held_until, self.clock() + seconds)

    def release(self) -> None:
        """Lift a hold (the quota pause was cleared or has ended)."""
        with self._lock:
            self._held_until = 0.0

    def paused_for(self) -> float:
        """Seconds left of the current pause or hold (0.0: none)."""
        with self._lock:
            return max(0.0, max(self._paused_until, self._held_until) - self.clock())

    def acquire(self, deadline: float, halt: threading.Event) -> bool:
        """Wait for a send slot; False if none comes before ``deadline`` or on halt.

        ``deadline`` is a value of :attr:`clock`: the last moment the send may
        start.
        """
        while not halt.is_set():
            with self._lock:
                now = self.clock()
                start = max(now, self._next_slot, self._paused_until, self._held_until)
                if start > deadline:
                    return False
                if start <= now:
                    self._next_slot = now + self._interval
                    return True
            halt.wait(min(start - now, 0.25))
        return False

    def sendable_within(self, seconds: float) -> int | None:
        """How many sends fit into ``seconds`` at the capped rate (None: no cap)."""
        if self._configured_interval == 0.0:
            return None
        return max(1, int(seconds / max(self._configured_interval, self.interval)))


def retry_delay(
    attempt: int,
    *,
    base: float,
    cap: float,
    retry_after: float | None = None,
    rng: random.Random | None = None,
) -> float:
    """Seconds until the next try: doubling per attempt, half jitter, Retry-After honoured.

    ``base`` doubles with each attempt up to ``cap``; half of that is fixed
    and half random, and the result is never below ``retry_after`` nor
    above ``cap``.
    """
    exponential = min(cap, base * 2.0 ** max(0, attempt - 1))
    jittered = exponential / 2.0 + (rng or random).uniform(0.0, exponential / 2.0)
    wait = retry_after if retry_after is not None and not math.isnan(retry_after) else 0.0
    return min(cap, max(jittered, wait))
