"""What one worker run did: the counts ``receipts worker`` prints, and why it stopped."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Literal

Counter = Literal["sent", "retried", "review", "lease_lost", "released", "unrecorded"]


@dataclass(kw_only=True)
class WorkerSummary:
    """What one run did; ``error`` is set when the run stopped on a problem.

    Counted from several threads (senders, recorders, the dispatcher);
    :meth:`count` and :meth:`stop` take a lock.
    """

    sent: int = 0
    retried: int = 0
    review: int = 0
    lease_lost: int = 0
    released: int = 0
    unrecorded: int = 0
    seconds: float = 0.0
    error: str | None = None
    exit_code: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count(self, counter: Counter, amount: int = 1) -> None:
        with self._lock:
            setattr(self, counter, getattr(self, counter) + amount)

    def stop(self, error: str, exit_code: int) -> None:
        """Record why the run stopped (the latest reason wins)."""
        with self._lock:
            self.error = error
            self.exit_code = exit_code

    def line(self) -> str:
        return (
            f"sent={self.sent} retried={self.retried} review={self.review} "
            f"lease_lost={self.lease_lost} released={self.released} "
            f"unrecorded={self.unrecorded} seconds={self.seconds:.2f}"
        )
