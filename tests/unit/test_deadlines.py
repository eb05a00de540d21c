"""receipts.deadlines: an action runs once its deadline passes, never after the block ended."""

from __future__ import annotations

import threading
import time

from receipts.deadlines import Deadlines


def test_an_action_runs_once_its_deadline_has_passed() -> None:
    """A block still running at its deadline has its action run, once, about on time."""
    deadlines = Deadlines()
    ran = threading.Event()
    started = time.monotonic()
    with deadlines.after(0.2, ran.set) as deadline:
        assert ran.wait(5)
        elapsed = time.monotonic() - started
    assert deadline.expired and 0.15 < elapsed < 3


def test_a_block_that_ends_in_time_never_runs_its_action() -> None:
    """Ending the block first releases the deadline: the action never runs, and a
    later deadline behind it still does."""
    deadlines = Deadlines()
    early, late = threading.Event(), threading.Event()
    with deadlines.after(0.3, early.set) as released:
        pass
    with deadlines.after(0.5, late.set):
        assert late.wait(5)
    assert not early.is_set() and not released.expired


def test_the_block_waits_for_an_action_in_progress() -> None:
    """When the action is running as the block ends, the block waits for it, so the
    socket or connection it acts on is not reused under it."""
    deadlines = Deadlines()
    entered, finished = threading.Event(), threading.Event()

    def slow() -> None:
        entered.set()
        time.sleep(0.3)
        finished.set()

    with deadlines.after(0.05, slow):
        assert entered.wait(5)
    assert finished.is_set()


def test_many_deadlines_fire_in_order_and_a_failing_action_is_harmless() -> None:
    """Deadlines registered out of order fire earliest first; an action that raises
    does not stop the others."""
    deadlines = Deadlines()
    fired: list[int] = []
    done = threading.Event()

    def boom() -> None:
        raise RuntimeError("ignored")

    def record(n: int) -> None:
        fired.append(n)
        if len(fired) == 3:
            done.set()

    blocks = [deadlines.after(delay, action) for delay, action in
              [(0.4, lambda: record(3)), (0.1, boom), (0.2, lambda: record(1)),
               (0.3, lambda: record(2))]]  # fmt: skip
    for block in blocks:
        block.__enter__()
    assert done.wait(5)
    for block in blocks:
        block.__exit__(None, None, None)
    assert fired == [1, 2, 3]
