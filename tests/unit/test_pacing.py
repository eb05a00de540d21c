"""The worker's pace and hold without a database: the send-rate cap, the pauses,
how many rows the dispatcher claims, and the semaphore the rows in hand hold."""

from __future__ import annotations

import threading

import pytest

from receipts.delivery.pacing import RATE_MARGIN, RateLimiter
from receipts.delivery.rows_in_hand import ClaimSizing, RowsInHand, claim_sizing
from tests.helpers import ManualClock

FAR = float("inf")


def test_slots_are_spaced_by_the_rate() -> None:
    """At 50 sends/s (spaced 1.05/50 s apart): a slot at once, then none until the
    clock has moved one interval, five times over."""
    clock = ManualClock()
    limiter = RateLimiter(50.0, clock)
    halt = threading.Event()
    interval = (1 + RATE_MARGIN) / 50.0
    assert limiter.acquire(clock(), halt)
    for _ in range(4):
        assert not limiter.acquire(clock() + 0.99 * interval, halt)
        clock.advance(1.01 * interval)
        assert limiter.acquire(clock(), halt)


def test_without_a_rate_slots_are_given_at_once() -> None:
    """Rate 0 means no cap: every slot at once, and no limit on how many fit into a lease."""
    clock = ManualClock()
    limiter = RateLimiter(0.0, clock)
    halt = threading.Event()
    assert all(limiter.acquire(clock(), halt) for _ in range(100))
    assert limiter.sendable_within(60.0) is None


def test_a_pause_holds_every_slot_until_it_ends() -> None:
    """After pause(0.3) no slot is given before 0.3 s have passed; a send that
    would have to start before then gets none at all."""
    clock = ManualClock()
    limiter = RateLimiter(0.0, clock)
    halt = threading.Event()
    limiter.pause(0.3)
    assert limiter.paused_for() == pytest.approx(0.3)
    assert not limiter.acquire(clock() + 0.25, halt)
    clock.advance(0.25)
    assert not limiter.acquire(clock(), halt)
    clock.advance(0.05)
    assert limiter.acquire(clock(), halt)
    assert limiter.paused_for() == 0.0


def test_a_shorter_pause_never_shortens_a_longer_one() -> None:
    """A second 429 with a shorter wait leaves the longer pause in force."""
    limiter = RateLimiter(0.0, ManualClock())
    limiter.pause(10.0)
    limiter.pause(1.0)
    assert limiter.paused_for() == pytest.approx(10.0)


def test_a_pause_says_whether_it_is_a_new_wait() -> None:
    """pause() is True when it extends the pause (worth a log line), False when a
    longer one was already on."""
    limiter = RateLimiter(0.0, ManualClock())
    assert limiter.pause(5.0)
    assert not limiter.pause(1.0)
    assert limiter.pause(10.0)


def test_a_hold_can_be_lifted_before_it_ends() -> None:
    """The quota pause is a hold: no slot while it is on, at once after release()."""
    clock = ManualClock()
    limiter = RateLimiter(0.0, clock)
    halt = threading.Event()
    limiter.hold(3600.0)
    assert limiter.paused_for() == pytest.approx(3600.0)
    assert not limiter.acquire(clock() + 0.1, halt)
    limiter.release()
    assert limiter.paused_for() == 0.0
    assert limiter.acquire(clock(), halt)


def test_the_provider_limit_slows_the_pace_with_a_margin_but_never_speeds_it_up() -> None:
    """Configured at 5/s (1.05/5 s apart): a provider saying 2/s spaces sends 1.05/2 s
    apart; one saying 10/s leaves the configured spacing; with no cap (0) the
    provider's limit is left to its 429s."""
    limiter = RateLimiter(5.0)
    assert limiter.interval == pytest.approx((1 + RATE_MARGIN) / 5.0)
    limiter.follow_provider_rate(2.0)
    assert limiter.interval == pytest.approx((1 + RATE_MARGIN) / 2.0)
    capped = RateLimiter(5.0)
    capped.follow_provider_rate(10.0)
    assert capped.interval == pytest.approx(0.21)
    uncapped = RateLimiter(0.0)
    uncapped.follow_provider_rate(2.0)
    assert uncapped.interval == 0.0


def test_at_the_provider_limit_slots_keep_the_margin() -> None:
    """Configured and told 50/s: a slot only every 21 ms, six times over."""
    clock = ManualClock()
    limiter = RateLimiter(50.0, clock)
    limiter.follow_provider_rate(50.0)
    halt = threading.Event()
    assert limiter.acquire(clock(), halt)
    for _ in range(5):
        clock.advance(0.0209)
        assert not limiter.acquire(clock(), halt)
        clock.advance(0.0002)
        assert limiter.acquire(clock(), halt)


def test_halt_ends_the_wait_for_a_slot() -> None:
    """A stopping worker's senders stop waiting for a slot and get none."""
    limiter = RateLimiter(0.0, ManualClock())
    limiter.pause(30.0)  # the clock never moves: only halt can end the wait
    halt = threading.Event()
    result: list[bool] = []
    waiting = threading.Thread(target=lambda: result.append(limiter.acquire(FAR, halt)))
    waiting.start()
    halt.set()
    waiting.join(timeout=5)
    assert result == [False]


def test_sendable_within_counts_the_sends_a_lease_has_room_for() -> None:
    """At 2 sends/s (spaced 1.05/2 s apart), 10.5 s hold 20 sends; never fewer than one."""
    assert RateLimiter(2.0).sendable_within(10.5) == 20
    assert RateLimiter(0.01).sendable_within(10.0) == 1


@pytest.mark.parametrize(
    ("concurrency", "send_window", "sendable", "expected"),
    [
        # The defaults: a 120 s lease, 5 + 10 s timeouts, 8 senders.
        pytest.param(8, 104.0, None, ClaimSizing(capacity=40, refill_at=16), id="defaults"),
        pytest.param(64, 104.0, None, ClaimSizing(capacity=128, refill_at=32), id="many-senders"),
        # Not one more full send fits after the first: no row waits behind a sender.
        pytest.param(8, 10.0, None, ClaimSizing(capacity=8, refill_at=1), id="short-lease"),
        pytest.param(8, 104.0, 20, ClaimSizing(capacity=20, refill_at=16), id="rate-cap"),
        # A cap below the refill mark: claim when every slot is free, not never.
        pytest.param(8, 104.0, 10, ClaimSizing(capacity=10, refill_at=10), id="low-rate-cap"),
    ],
)
def test_claim_sizing(
    concurrency: int, send_window: float, sendable: int | None, expected: ClaimSizing
) -> None:
    """Senders plus up to PREFETCH (or concurrency) waiting rows, no more than can
    start inside their leases, refilled when half the waiting rows are used."""
    sizing = claim_sizing(
        concurrency=concurrency, send_window=send_window, send_budget=15.0, sendable=sendable
    )
    assert sizing == expected


def test_rows_in_hand_hold_a_slot_each_until_let_go() -> None:
    """Claimed rows keep the slots reserved for them, the rest go back; letting
    rows go from other threads frees their slots; a slot let go twice raises
    instead of inflating the count."""
    rows = RowsInHand(10)
    assert rows.none_in_hand()
    assert rows.reserve(at_least=1) == 10
    rows.give_back(7)  # the claim came back with three rows
    assert not rows.none_in_hand()
    assert rows.reserve(at_least=8) == 0  # only seven free: not worth a claim yet
    senders = [threading.Thread(target=rows.let_go) for _ in range(3)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    assert rows.none_in_hand()
    with pytest.raises(ValueError):
        rows.let_go()


def test_a_reservation_takes_every_free_slot_and_no_more() -> None:
    """The dispatcher never holds more rows than its capacity: once every slot
    is reserved, nothing more can be."""
    rows = RowsInHand(4)
    assert rows.reserve(at_least=1) == 4
    assert rows.reserve(at_least=0) == 0
    rows.give_back(4)
    assert rows.none_in_hand()


def test_with_batches_a_reservation_takes_whole_batches_of_slots() -> None:
    """A claim for 150 free slots with batches of 100 would send 50 rows as a second,
    smaller request: only 100 are taken, and the 50 wait for the next 50."""
    rows = RowsInHand(200)
    assert rows.reserve(at_least=100, multiple_of=100) == 200
    rows.give_back(150)
    assert rows.reserve(at_least=100, multiple_of=100) == 100
    assert rows.reserve(at_least=100, multiple_of=100) == 0  # 50 free: not a batch
    for _ in range(50):
        rows.let_go()
    assert rows.reserve(at_least=100, multiple_of=100) == 100
