"""The fleet's share of the provider's limit (receipts.delivery.fleet_pace), against
real PostgreSQL, with two paces on two connection pools standing in for two worker
processes.

No test waits for a slot: a halt event that records each wait it is asked for
and returns at once shows what a sender would have waited. The intervals are
long (minutes), so the server's clock moving on between two statements cannot
change what is reserved.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import psycopg
import pytest

from receipts.config import Settings
from receipts.db import Database
from receipts.delivery.fleet_pace import FleetPace
from receipts.delivery.pacing import RATE_MARGIN, RateLimiter
from tests.fake_provider import FakeProviderClient
from tests.helpers import ManualClock, free_port
from tests.outbox_states import insert_pending
from tests.worker_runs import work

Row = dict[str, Any]
DB = psycopg.Connection[Row]
PROVIDER = "resend"
# One request every 105 s fleet-wide: a share of 0.01 of a 1 request/s limit.
SHARE = 0.01
LIMIT = 1.0
INTERVAL = (1 + RATE_MARGIN) / (SHARE * LIMIT)
FAR = 10 * INTERVAL  # a deadline that every test's reservations fit before


class RecordingHalt(threading.Event):
    """Never set; each wait it is asked for is recorded and returns at once."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(0.0 if timeout is None else timeout)
        return False


class Process:
    """One worker process's view: its own pool, local pace, clock and fleet pace."""

    def __init__(self, database_url: str, share: float = SHARE) -> None:
        self.database = Database(database_url, max_size=2)
        self.clock = ManualClock()
        self.limiter = RateLimiter(0.0, self.clock)
        self.pace = FleetPace(
            self.database, provider=PROVIDER, share=share, limiter=self.limiter, clock=self.clock
        )
        self.halt = RecordingHalt()

    def acquire(self, within: float = FAR) -> bool:
        return self.pace.acquire(self.clock() + within, self.halt)


@pytest.fixture
def processes(database_url: str) -> Iterator[tuple[Process, Process]]:
    first, second = Process(database_url), Process(database_url)
    try:
        yield first, second
    finally:
        first.database.close()
        second.database.close()


def next_slot_ahead(db: DB) -> float:
    """Seconds from the server's now to the fleet's next free start time."""
    row = db.execute(
        "SELECT extract(epoch FROM next_slot - clock_timestamp())::float8 AS ahead"
        " FROM send_pace WHERE provider = %s",
        (PROVIDER,),
    ).fetchone()
    assert row is not None
    return float(row["ahead"])


def next_slot(db: DB) -> Any:
    row = db.execute("SELECT next_slot FROM send_pace WHERE provider = %s", (PROVIDER,)).fetchone()
    assert row is not None
    return row["next_slot"]


def test_until_the_provider_states_a_limit_requests_are_not_spaced_fleet_wide(
    db: DB, processes: tuple[Process, Process]
) -> None:
    first, second = processes
    for process in (first, second, first, second):
        assert process.acquire()
    assert first.halt.waits == [] and second.halt.waits == []
    row = db.execute("SELECT team_limit FROM send_pace").fetchone()
    assert row == {"team_limit": None}


def test_a_limit_one_process_heard_spaces_every_process_one_interval_apart(
    db: DB, processes: tuple[Process, Process]
) -> None:
    """The first process hears the provider's limit; from then on the two processes'
    start times follow one another exactly one interval apart, whoever asks."""
    first, second = processes
    first.pace.heard(limit_per_second=LIMIT, pause_seconds=0.0)
    assert db.execute("SELECT team_limit FROM send_pace").fetchone() == {"team_limit": LIMIT}

    slots = []
    for process in (first, second, second, first):
        assert process.acquire()
        slots.append(next_slot(db))
    gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(slots)]
    assert gaps == [pytest.approx(INTERVAL, abs=1e-6)] * 3
    # Each process waited for its own slot: the n-th start is n intervals out.
    waits = second.halt.waits + first.halt.waits
    assert sorted(round(wait / INTERVAL) for wait in waits) == [1, 2, 3]


def test_no_slot_before_the_deadline_takes_nothing_and_pauses_the_process(
    db: DB, processes: tuple[Process, Process]
) -> None:
    """Two slots taken put the next one two intervals out: a sender that must start
    within one interval gets none, the fleet's schedule is unchanged, and its
    process pauses until that slot (its dispatcher then waits, or a drain run ends)."""
    first, second = processes
    first.pace.heard(limit_per_second=LIMIT, pause_seconds=0.0)
    assert first.acquire() and first.acquire()
    before = next_slot(db)

    assert not second.acquire(within=INTERVAL)
    assert next_slot(db) == before
    assert second.limiter.paused_for() == pytest.approx(next_slot_ahead(db), abs=5)
    assert second.limiter.paused_for() > INTERVAL


def test_a_wait_one_process_was_asked_for_holds_every_process(
    db: DB, processes: tuple[Process, Process]
) -> None:
    """A 429 asking for a minute, heard by the first process, holds the second too,
    though no limit was ever stated: no slot within 30 s, one after the minute."""
    first, second = processes
    first.pace.heard(limit_per_second=None, pause_seconds=60.0)

    assert not second.acquire(within=30.0)
    assert second.acquire(within=120.0)
    [wait] = second.halt.waits
    assert 30.0 < wait <= 60.0
    # A shorter wait asked later never shortens the hold.
    first.pace.heard(limit_per_second=None, pause_seconds=1.0)
    assert next_slot_ahead(db) > 30.0


def test_the_limit_is_written_only_when_it_changes(
    db: DB, processes: tuple[Process, Process]
) -> None:
    first, _ = processes
    first.pace.heard(limit_per_second=5.0, pause_seconds=0.0)
    written = db.execute("SELECT updated_at FROM send_pace").fetchone()
    for _ in range(3):
        first.pace.heard(limit_per_second=5.0, pause_seconds=0.0)
    assert db.execute("SELECT updated_at FROM send_pace").fetchone() == written
    first.pace.heard(limit_per_second=10.0, pause_seconds=0.0)
    assert db.execute("SELECT team_limit FROM send_pace").fetchone() == {"team_limit": 10.0}


def test_an_unreachable_database_leaves_the_process_its_own_pace(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The fleet's pace only ever delays a send: without it the process sends at
    its own pace, and says so."""
    database = Database(f"postgresql://nobody@127.0.0.1:{free_port()}/none", timeout=0.5)
    clock = ManualClock()
    pace = FleetPace(
        database, provider=PROVIDER, share=SHARE, limiter=RateLimiter(0.0, clock), clock=clock
    )
    try:
        with caplog.at_level(logging.WARNING, logger="receipts.delivery.fleet_pace"):
            assert pace.acquire(clock() + 10, RecordingHalt())
            pace.heard(limit_per_second=5.0, pause_seconds=1.0)
    finally:
        database.close()
    messages = [record.getMessage() for record in caplog.records]
    assert any("keeps its own pace" in message for message in messages)
    assert any("only this worker follows it" in message for message in messages)


def test_a_share_must_be_above_zero(database_url: str) -> None:
    database = Database(database_url)
    try:
        with pytest.raises(ValueError, match="share"):
            FleetPace(database, provider=PROVIDER, share=0.0, limiter=RateLimiter(0.0))
    finally:
        database.close()


# --- the worker ----------------------------------------------------------------------


def test_a_429_one_worker_hears_holds_the_next_worker_before_it_sends(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """The first worker's only request is answered 429 with Retry-After: 60; a second
    worker (another process, as far as the pace knows) sends nothing, releases what it
    claimed and ends its drain run, leaving the rest to the next run."""
    insert_pending(db, 3)
    capped = replace(worker_settings, send_rate=100.0)  # a cap: the fleet's pace is on
    fake.script({"status": 429, "name": "rate_limit_exceeded", "headers": {"Retry-After": "60"}})

    first = work(capped, concurrency=1, max_seconds=5)
    assert first.rate_limited == 1 and first.sent == 0
    assert next_slot_ahead(db) > 50.0

    second = work(capped, concurrency=1)
    assert second.sent == 0 and second.released >= 1
    assert fake.stats()["requests"] == 1
    assert db.execute(
        "SELECT count(*) AS n FROM email_outbox WHERE status = 'pending'"
    ).fetchone() == {"n": 3}


def test_the_limit_a_worker_hears_is_the_fleets(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """Resend's ratelimit-limit on an answer is written for every worker process."""
    fake.configure(rate_limit=7)
    insert_pending(db, 2)
    summary = work(replace(worker_settings, send_rate=100.0))
    assert summary.sent == 2
    assert db.execute("SELECT team_limit FROM send_pace").fetchone() == {"team_limit": 7.0}


def test_an_uncapped_worker_takes_no_part_in_the_fleets_pace(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """RECEIPTS_SEND_RATE=0 means no cap at all: nothing is reserved."""
    fake.configure(rate_limit=7)
    insert_pending(db, 2)
    assert work(worker_settings).sent == 2
    assert db.execute("SELECT count(*) AS n FROM send_pace").fetchone() == {"n": 0}
