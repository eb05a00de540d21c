"""How many rows the dispatcher holds, and how many it claims at a time.

A row is *in hand* from its claim until its answer is recorded (or it is
released, or given up on). Each row in hand holds one of the slots
:func:`claim_sizing` sizes: the dispatcher reserves free slots before it
claims, each claimed row keeps one, and whoever lets the row go (the
recorder, or a sender that failed) releases it. Releasing a slot twice
raises instead of letting the count drift.
docs/architecture.md, "Delivery: claim, send, record", explains the sizing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

# Rows claimed ahead of a free sender slot, at least.
PREFETCH = 32


@dataclass(frozen=True, kw_only=True)
class ClaimSizing:
    capacity: int  # the most rows in hand at once: being sent, or waiting for a sender
    refill_at: int  # claim again once this many slots are free


def claim_sizing(
    *,
    concurrency: int,
    send_window: float,
    send_budget: float,
    sendable: int | None,
    per_request: int = 1,
) -> ClaimSizing:
    """The dispatcher's limits, for ``concurrency`` senders.

    A few rows wait in memory behind the ones being sent (``PREFETCH``, or
    ``concurrency`` if more), so a sender that frees up finds its next row at
    once; claiming again only when half of them are used keeps the claim
    queries few. A waiting row is sent within a few send times, far inside
    its lease: even if every send took its full timeout (``send_budget``), a
    waiting row starts within ``send_window``. With a rate cap, never more
    are held than ``sendable`` (the sends that fit into ``send_window``).
    With batches, a request carries up to ``per_request`` rows: every limit
    above, counted in requests, holds that many times as many rows.
    """
    rounds_within_lease = int(send_window // send_budget)
    prefetch = min(max(PREFETCH, concurrency), concurrency * rounds_within_lease)
    capacity = concurrency + prefetch
    if sendable is not None:
        capacity = min(capacity, sendable)
    refill_at = min(capacity, max(1, prefetch // 2))
    return ClaimSizing(capacity=capacity * per_request, refill_at=refill_at * per_request)


class RowsInHand:
    """One slot per row in hand; at most ``capacity`` rows at once.

    Before it claims, the dispatcher reserves the free slots (:meth:`reserve`)
    and gives back those no claimed row took (:meth:`give_back`); whoever lets
    a row go, from any thread, calls :meth:`let_go`. A count under a lock: the
    dispatcher looks at it once per wake-up and each row is let go once, so
    neither should cost a semaphore operation per slot.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._free = capacity
        self._lock = threading.Lock()

    def reserve(self, at_least: int, multiple_of: int = 1) -> int:
        """Take the free slots if at least ``at_least`` are free (else none), as many as
        make a whole number of ``multiple_of`` (a batch's rows); how many taken."""
        with self._lock:
            taken = self._free - self._free % multiple_of
            if taken < at_least or taken == 0:
                return 0
            self._free -= taken
            return taken

    def give_back(self, slots: int) -> None:
        """Return reserved slots that no row took."""
        if slots:
            self._release(slots)

    def let_go(self) -> int:
        """One row is no longer in hand: its slot is free again. Returns the free slots."""
        return self._release(1)

    def none_in_hand(self) -> bool:
        """True when every slot is free."""
        with self._lock:
            return self._free == self.capacity

    def _release(self, slots: int) -> int:
        with self._lock:
            if self._free + slots > self.capacity:
                raise ValueError("a slot was let go more often than it was taken")
            self._free += slots
            return self._free
