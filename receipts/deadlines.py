"""Deadlines for blocking work: one thread per process runs an action when one passes.

A request thread blocked in a socket read or waiting on a database statement
cannot time itself out. :func:`after` registers an action (cut the read side
of a slow client's socket, cancel a statement) that runs once ``seconds`` have
passed, unless the ``with`` block ends first. The usual case costs a heap push
and a flag under a lock: no thread, no timer, no round trip.

When the block ends while its action is running, it waits for the action to
finish, so the socket or connection is never reused under a late action. An
action that raises is ignored: the deadline has passed either way, and the
blocked caller sees the effect (or not) as an error of its own.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, field

Action = Callable[[], object]


@dataclass(order=True)
class Deadline:
    """One registered deadline; ``expired`` tells the caller its action ran."""

    at: float
    serial: int
    action: Action = field(compare=False)
    released: bool = field(default=False, compare=False)
    expired: bool = field(default=False, compare=False)
    finished: threading.Event = field(default_factory=threading.Event, compare=False)


class Deadlines:
    """A heap of deadlines and the one daemon thread that acts on them.

    Deadlines are read on ``clock`` (``time.monotonic``; a test passes a clock
    it moves itself). The thread waits in real seconds until the earliest
    deadline is due by that clock, and then looks at the clock again.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._wake = threading.Condition()
        self._heap: list[Deadline] = []
        self._serials = itertools.count()
        self._thread: threading.Thread | None = None
        self._owner_pid = 0

    @contextmanager
    def after(self, seconds: float, action: Action) -> Iterator[Deadline]:
        """Run ``action`` in ``seconds`` unless the block has ended by then."""
        deadline = Deadline(self._clock() + seconds, next(self._serials), action)
        with self._wake:
            self._ensure_thread()
            heapq.heappush(self._heap, deadline)
            if self._heap[0] is deadline:
                self._wake.notify()
        try:
            yield deadline
        finally:
            with self._wake:
                deadline.released = True
                running = deadline.expired
            if running:
                deadline.finished.wait()

    def _ensure_thread(self) -> None:
        # A forked child (a gunicorn worker) has the heap but not the thread.
        if self._thread is None or self._owner_pid != os.getpid():
            self._owner_pid = os.getpid()
            self._thread = threading.Thread(target=self._run, name="deadlines", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._wake:
                due = self._next_due()
            if due is not None:
                threading.Thread(target=self._act, args=(due,), daemon=True).start()

    def _next_due(self) -> Deadline | None:
        """Wait (lock held) until a live deadline passes; mark it expired and return it."""
        while True:
            while self._heap and self._heap[0].released:
                heapq.heappop(self._heap)
            if not self._heap:
                self._wake.wait()
                continue
            delay = self._heap[0].at - self._clock()
            if delay > 0:
                self._wake.wait(delay)
                continue
            due = heapq.heappop(self._heap)
            due.expired = True
            return due

    @staticmethod
    def _act(due: Deadline) -> None:
        # Each action in a thread of its own: a slow one (a cancel request to a
        # server that does not answer) must not hold back the others.
        try:
            with suppress(Exception):
                due.action()
        finally:
            due.finished.set()


_PROCESS_DEADLINES = Deadlines()


def after(seconds: float, action: Action) -> AbstractContextManager[Deadline]:
    """:meth:`Deadlines.after` on this process's deadlines."""
    return _PROCESS_DEADLINES.after(seconds, action)
