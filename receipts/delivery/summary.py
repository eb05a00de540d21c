"""What one worker run did: the counts ``receipts worker`` prints, why it stopped, its exit code."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Literal

Counter = Literal[
    "sent",
    "retried",
    "rate_limited",
    "review",
    "lease_lost",
    "released",
    "unrecorded",
    "record_retries",
]


class ExitCode(IntEnum):
    """``receipts worker``'s exit codes, for cron monitors (README, "Exit codes").

    Only a drain run (no ``--loop``) ends with ``SENDING_PAUSED`` or
    ``PROVIDER_FAILING``; a ``--loop`` worker waits the pause out and keeps
    retrying, and exits 0 on SIGTERM.
    """

    OK = 0
    UNEXPECTED = 1  # a failure the worker has no name for (see the log)
    CONFIGURATION = 2  # a setting is wrong: start-up check, or the provider refused it
    DATABASE = 3  # the database could not be reached
    SENDING_PAUSED = 4  # a quota answer paused sending (now, or earlier until a reset)
    PROVIDER_FAILING = 5  # every send of the run failed: timeouts, 5xx, connection errors


@dataclass(kw_only=True)
class WorkerSummary:
    """What one run did; ``error`` is set when the run stopped on a problem.

    Counted from several threads (senders, recorders, the dispatcher);
    :meth:`count` and :meth:`stop` take a lock.
    """

    sent: int = 0
    retried: int = 0
    rate_limited: int = 0
    review: int = 0
    lease_lost: int = 0
    released: int = 0
    unrecorded: int = 0
    record_retries: int = 0  # batches written again after the database failed them
    seconds: float = 0.0
    error: str | None = None
    exit_code: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count(self, counter: Counter, amount: int = 1) -> None:
        with self._lock:
            setattr(self, counter, getattr(self, counter) + amount)

    def stop(self, error: str, exit_code: int, *, unless_stopped: bool = False) -> None:
        """Record why the run stopped; a configuration error is never overwritten,
        and with ``unless_stopped`` no reason already given is."""
        with self._lock:
            if self.exit_code == ExitCode.CONFIGURATION or (unless_stopped and self.error):
                return
            self.error = error
            self.exit_code = exit_code

    @property
    def every_send_failed(self) -> bool:
        """Sends were made and none got an answer that shows the provider working:
        no email accepted, none refused for review, only retries."""
        return self.retried > 0 and self.sent == 0 and self.review == 0 and self.rate_limited == 0

    def final_exit_code(self) -> int:
        """The run's exit code: why it stopped, else whether the provider failed every send."""
        if self.error is not None:
            return self.exit_code or ExitCode.UNEXPECTED
        if self.every_send_failed:
            return ExitCode.PROVIDER_FAILING
        return ExitCode.OK

    def line(self) -> str:
        return (
            f"sent={self.sent} retried={self.retried} rate_limited={self.rate_limited} "
            f"review={self.review} lease_lost={self.lease_lost} released={self.released} "
            f"unrecorded={self.unrecorded} seconds={self.seconds:.2f}"
        )
