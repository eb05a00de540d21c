"""receipts.deadlines: an action runs once its deadline passes, never after the block ended.

Deadlines are read on a clock the test moves (``ManualClock``): an action is
due when the test says, so what is due and what is not is known exactly.
Actions run on threads of their own, so only when an action runs is asserted,
never in which order two due actions finish.
"""

from __future__ import annotations

import threading

from receipts.deadlines import Deadlines
from tests.helpers import ManualClock

# The unit of these tests: a binary fraction of a second, so that deadlines and
# the clock moved by whole ticks compare exactly.
TICK = 1 / 64


def test_an_action_runs_once_its_deadline_has_passed() -> None:
    """Not before its deadline, once after it, however long the block goes on."""
    clock = ManualClock()
    deadlines = Deadlines(clock)
    runs: list[float] = []
    ran = threading.Event()

    def action() -> None:
        runs.append(clock())
        ran.set()

    start = clock()
    with deadlines.after(2 * TICK, action) as deadline:
        clock.advance(TICK)
        assert not ran.is_set() and not deadline.expired
        clock.advance(TICK)
        assert ran.wait(5)
        clock.advance(100 * TICK)
    assert deadline.expired and len(runs) == 1 and runs[0] >= start + 2 * TICK


def test_a_block_that_ends_in_time_never_runs_its_action() -> None:
    """Ending the block first releases the deadline: the action never runs, and a
    later deadline behind it still does."""
    clock = ManualClock()
    deadlines = Deadlines(clock)
    early, late = threading.Event(), threading.Event()
    with deadlines.after(TICK, early.set) as released:
        pass
    with deadlines.after(2 * TICK, late.set):
        clock.advance(3 * TICK)  # both are due now
        assert late.wait(5)
    assert not early.is_set() and not released.expired


def test_the_block_waits_for_an_action_in_progress() -> None:
    """When the action is running as the block ends, the block waits for it, so the
    socket or connection it acts on is not reused under it."""
    clock = ManualClock()
    deadlines = Deadlines(clock)
    entered, go_on = threading.Event(), threading.Event()
    events: list[str] = []

    def action() -> None:
        entered.set()
        go_on.wait(10)
        events.append("action finished")

    def block() -> None:
        with deadlines.after(TICK, action):
            clock.advance(TICK)
            entered.wait(5)
        events.append("block ended")

    blocked = threading.Thread(target=block)
    blocked.start()
    assert entered.wait(5)
    # A block that did not wait would end at once; this one cannot end while the
    # action is held.
    blocked.join(timeout=0.2)
    assert blocked.is_alive() and events == []
    go_on.set()
    blocked.join(timeout=5)
    assert events == ["action finished", "block ended"]


def test_deadlines_registered_out_of_order_fire_as_each_comes_due() -> None:
    """Registered as 4, 1, 2, 3 ticks from now: as the clock reaches each,
    that one fires and none due later; an action that raises (1) stops nothing."""
    clock = ManualClock()
    deadlines = Deadlines(clock)
    fired = {n: threading.Event() for n in (2, 3, 4)}

    def boom() -> None:
        raise RuntimeError("ignored")

    blocks = [
        deadlines.after(delay, action)
        for delay, action in [
            (4 * TICK, fired[4].set),
            (TICK, boom),
            (2 * TICK, fired[2].set),
            (3 * TICK, fired[3].set),
        ]
    ]
    entered = [block.__enter__() for block in blocks]
    clock.advance(TICK)
    for n in (2, 3, 4):
        clock.advance(TICK)
        assert fired[n].wait(5), n
        assert [m for m, event in fired.items() if event.is_set()] == list(range(2, n + 1))
        assert [d.expired for d in entered] == [n == 4, True, True, n >= 3]
    for block in blocks:
        block.__exit__(None, None, None)
