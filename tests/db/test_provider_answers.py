"""Each row of the answer table end to end: a real worker, real PostgreSQL, the fake Resend.

Every error Resend documents is answered by the fake with Resend's body and
headers, and the worker's run is checked for what the table says
(docs/architecture.md, "What each provider answer does"): the row, its
attempt budget, the run's exit code and message. Then what a single answer
cannot show: the quota pause seen by a second worker and by a ``--loop``
worker, the cap on a provider's wait, and the exit code of a run whose every
send failed. One sender, unless a test says otherwise: the scripted answer is the
first request's, and no other request is in flight when it comes. The table
without a database is tests/unit/test_decisions.py; the same pause across
worker processes is in tests/processes/test_worker_processes.py. The pace of
sends against a provider that enforces its rate is measured, in real time, by
bench/pacing.py.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import Any

import psycopg
import pytest

from receipts.config import Settings
from receipts.db import Database
from receipts.delivery.rules import Reaction, Rule
from receipts.delivery.rules.resend import RESEND_ERRORS
from receipts.delivery.sending_pause import clear_pause
from receipts.delivery.summary import ExitCode
from tests.fake_provider import FakeProviderClient
from tests.helpers import ManualClock, wait_for
from tests.outbox_states import insert_pending
from tests.resend_errors import DOCUMENTED
from tests.worker_runs import work, work_in_background

Row = dict[str, Any]
DB = psycopg.Connection[Row]


def outbox(db: DB) -> list[Row]:
    return db.execute(
        "SELECT message_key, status, attempts, review_reason, first_attempt_at"
        " FROM email_outbox ORDER BY 1"
    ).fetchall()


def outcomes(db: DB) -> list[str]:
    found = db.execute("SELECT outcome FROM email_attempts WHERE outcome IS NOT NULL ORDER BY id")
    return [row["outcome"] for row in found]


def pauses(db: DB) -> list[Row]:
    return db.execute("SELECT provider, reason FROM sending_pauses").fetchall()


# --- every documented error -------------------------------------------------------

# What the run must show for each reaction, checked in check_run below.
EXTRA_ROWS = [
    pytest.param({"status": 502}, Rule(Reaction.RETRY), id="unknown-5xx"),
    pytest.param({"status": 418}, Rule(Reaction.REVIEW), id="unknown-4xx"),
    pytest.param({"status": 404}, Rule(Reaction.CONFIGURATION, "RESEND_API_URL"), id="404-bare"),
    pytest.param({"no_id": True}, Rule(Reaction.RETRY), id="2xx-without-id"),
    pytest.param({"hold": "until-the-test-ends"}, Rule(Reaction.RETRY), id="timeout"),
]


def _documented_cases() -> list[Any]:
    cases = []
    for status, name, message in DOCUMENTED:
        rule = RESEND_ERRORS[(status, name)]
        if (status, name) == (400, "validation_error") and "API key" in message:
            rule = Rule(Reaction.CONFIGURATION, "RESEND_API_KEY")
        script = {"status": status, "name": name, "message": message}
        cases.append(pytest.param(script, rule, id=f"{status}-{name}-{message[:20]}"))
    return cases


@pytest.mark.parametrize(("script", "rule"), _documented_cases() + EXTRA_ROWS)
def test_each_answer_does_what_the_table_says_to_the_row_and_the_run(
    db: DB,
    fake: FakeProviderClient,
    worker_settings: Settings,
    script: dict[str, Any],
    rule: Rule,
) -> None:
    """Three ready receipts, the first request answered as scripted: the answered
    row, the other two, the attempt budget, the run's exit code and what it says."""
    insert_pending(db, 3)
    fake.script(script)
    summary = work(worker_settings, concurrency=1)
    rows = outbox(db)
    statuses = sorted(row["status"] for row in rows)
    code = summary.final_exit_code()
    if rule.reaction == Reaction.REVIEW:
        assert statuses == ["review", "sent", "sent"] and code == ExitCode.OK
        [refused] = [row for row in rows if row["status"] == "review"]
        assert refused["review_reason"] == script.get("name", f"http_{script['status']}")
        assert refused["attempts"] == 1
    elif rule.reaction == Reaction.RETRY:
        assert statuses == ["pending", "sent", "sent"] and code == ExitCode.OK
        assert [row["attempts"] for row in rows] == [1, 1, 1]  # the retry counted
        assert "retry" in outcomes(db)
    elif rule.reaction == Reaction.RATE_LIMITED:
        # Not the message's fault: refunded, and sent once the pause is over, by
        # this run if it still runs when the row comes due, else by the next.
        assert code == ExitCode.OK and statuses.count("sent") >= 2
        assert sorted(row["attempts"] for row in rows) in ([0, 1, 1], [1, 1, 1])
        db.execute("UPDATE email_outbox SET available_at = now() WHERE status = 'pending'")
        work(worker_settings, concurrency=1)
        rows = outbox(db)
        assert [row["status"] for row in rows] == ["sent"] * 3
        assert [row["attempts"] for row in rows] == [1, 1, 1]
        assert outcomes(db).count("rate_limited") == 1
    elif rule.reaction == Reaction.QUOTA:
        assert code == ExitCode.SENDING_PAUSED and summary.error is not None
        quota = "monthly quota" if "monthly" in script["name"] else "daily quota"
        assert summary.error.startswith(f"sending paused: {quota} until ")
        assert statuses == ["pending"] * 3 and [row["attempts"] for row in rows] == [0, 0, 0]
        # Nothing can have reached the provider: the retry clock has not started.
        assert [row["first_attempt_at"] for row in rows] == [None] * 3
        assert pauses(db) == [{"provider": "resend", "reason": script["name"]}]
        assert fake.stats()["requests"] == 1
    else:
        assert rule.reaction == Reaction.CONFIGURATION and rule.fix is not None
        assert code == ExitCode.CONFIGURATION and summary.error is not None
        variable = rule.fix.split(":")[0].removeprefix("check ").split("'")[0]
        assert variable in summary.error and f"HTTP {script['status']}" in summary.error
        assert statuses == ["pending"] * 3 and [row["attempts"] for row in rows] == [0, 0, 0]
        assert fake.stats()["requests"] == 1
    if rule.reaction != Reaction.QUOTA:
        assert pauses(db) == []


# --- the quota pause across workers -----------------------------------------------


def test_a_quota_answer_pauses_every_later_run_until_the_quota_resets(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """The fake's daily quota of 2 runs out: the run sends 2, gets the quota answer,
    stops with exit 4, and a later run sends nothing at all (exit 4, the same line).
    Once the pause has ended (its time moved into the past) sending resumes."""
    insert_pending(db, 5)
    fake.configure(daily_quota=2, quota_retry_after=3600)
    first = work(worker_settings, concurrency=1)
    assert (first.sent, first.final_exit_code()) == (2, ExitCode.SENDING_PAUSED)
    assert first.error is not None and first.error.startswith("sending paused: daily quota until")
    requests_so_far = fake.stats()["requests"]
    second = work(worker_settings, concurrency=1)
    assert (second.sent, second.final_exit_code()) == (0, ExitCode.SENDING_PAUSED)
    assert second.error is not None and second.error.startswith("sending paused: daily quota")
    assert fake.stats()["requests"] == requests_so_far  # not one request while paused
    pending = db.execute(
        "SELECT count(*) AS n, sum(attempts) AS spent FROM email_outbox WHERE status = 'pending'"
    ).fetchone()
    assert pending == {"n": 3, "spent": 0}
    left = db.execute(
        "SELECT extract(epoch FROM paused_until - now()) AS s FROM sending_pauses"
    ).fetchone()
    assert left is not None and 3500 < left["s"] <= 3600  # the provider's Retry-After
    fake.configure(daily_quota=None)
    db.execute("UPDATE sending_pauses SET paused_until = paused_at + interval '1 ms'")
    third = work(worker_settings, concurrency=1)
    assert (third.sent, third.final_exit_code()) == (3, ExitCode.OK)


@pytest.mark.parametrize("retry_after", ["inf", "604800"])
def test_a_quota_asking_for_ever_pauses_for_a_day_at_most(
    db: DB, fake: FakeProviderClient, worker_settings: Settings, retry_after: str
) -> None:
    """Retry-After: inf (or a week) on a quota answer: the pause recorded for every
    worker is the one-day bound, and the run still stops with exit 4."""
    insert_pending(db, 2)
    fake.script({"status": 429, "name": "daily_quota_exceeded",
                 "headers": {"Retry-After": retry_after}})  # fmt: skip
    summary = work(worker_settings, concurrency=1)
    assert summary.final_exit_code() == ExitCode.SENDING_PAUSED and summary.unrecorded == 0
    left = db.execute(
        "SELECT extract(epoch FROM paused_until - now()) AS s FROM sending_pauses"
    ).fetchone()
    assert left is not None and 24 * 3600 - 60 < left["s"] <= 24 * 3600


def test_a_loop_worker_waits_out_a_pause_another_worker_recorded_and_resumes_when_cleared(
    db: DB, fake: FakeProviderClient, worker_settings: Settings, database_url: str
) -> None:
    """A --loop worker hits the quota: it records the pause, keeps running without
    sending, and every row stays pending with no attempt spent; a drain run started
    meanwhile sends nothing (exit 4). When the pause is lifted (an upgraded plan,
    ``receipts worker --resume``) the loop worker sends the rest within its poll."""
    fake.configure(daily_quota=2)
    insert_pending(db, 5)
    stop = threading.Event()
    with work_in_background(
        worker_settings, loop=True, stop_event=stop, poll_seconds=0.3, concurrency=2
    ) as result:
        wait_for(lambda: pauses(db) != [])
        assert work(worker_settings, concurrency=1).final_exit_code() == ExitCode.SENDING_PAUSED
        # Polls of the loop worker have gone by meanwhile: none of them sent.
        assert fake.stats()["deliveries"] == 2
        fake.configure(daily_quota=None)
        database = Database(database_url)
        with database.transaction() as conn:
            assert clear_pause(conn, "resend") is not None
        database.close()
        wait_for(lambda: fake.stats()["deliveries"] == 5)
        stop.set()
    assert result[0].final_exit_code() == ExitCode.OK and result[0].sent == 5
    assert db.execute("SELECT sum(attempts) AS n FROM email_outbox").fetchone() == {"n": 5}


def test_a_long_pause_does_not_push_a_receipt_past_its_retry_cutoff(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """A quota answer refunds the attempt and, since nothing of the row can have
    reached the provider, restarts its retry clock: after a day-long pause the row
    is sent, not sent to review as retry_window_elapsed. A row with an earlier
    counted retry (a retry may have been accepted) keeps its clock, as the cutoff
    requires."""
    [retried] = insert_pending(db, 1, prefix="in_1Retried")
    fake.script({"status": 500})  # attempt 1 counted, logged retry
    work(worker_settings, concurrency=1)
    [fresh] = insert_pending(db, 1, prefix="in_1Fresh")
    db.execute("UPDATE email_outbox SET available_at = now()")
    fake.configure(daily_quota=0)
    assert work(worker_settings, concurrency=1).final_exit_code() == ExitCode.SENDING_PAUSED
    clocks = {row["message_key"]: row["first_attempt_at"] for row in outbox(db)}
    assert clocks[fresh] is None and clocks[retried] is not None
    # A day later the quota has reset: the untouched clock sends, the other reviews.
    db.execute("DELETE FROM sending_pauses")
    db.execute("UPDATE email_outbox SET first_attempt_at = first_attempt_at - interval '1 day'")
    fake.configure(daily_quota=None)
    work(worker_settings, concurrency=1)
    states = {row["message_key"]: (row["status"], row["review_reason"]) for row in outbox(db)}
    assert states == {fresh: ("sent", None), retried: ("review", "retry_window_elapsed")}


# --- caps, pace and failure -------------------------------------------------------


@pytest.mark.parametrize("retry_after", ["86400", "inf"])
def test_a_loop_worker_caps_the_providers_wait_and_says_so(
    db: DB,
    fake: FakeProviderClient,
    worker_settings: Settings,
    caplog: pytest.LogCaptureFixture,
    retry_after: str,
) -> None:
    """Retry-After: 86400 (or inf) pauses a --loop worker only as long as the cap
    (RECEIPTS_RETRY_MAX_SECONDS, here 1 s on the worker's clock), with a log line
    saying what was asked."""
    settings = replace(worker_settings, retry_max_seconds=1.0)
    insert_pending(db, 3)
    fake.script({"status": 429, "name": "rate_limit_exceeded",
                 "headers": {"Retry-After": retry_after}})  # fmt: skip
    clock = ManualClock()
    stop = threading.Event()
    caplog.set_level(logging.WARNING, logger="receipts.delivery.worker")
    with work_in_background(
        settings, loop=True, stop_event=stop, poll_seconds=0.2, concurrency=1, clock=clock
    ):
        wait_for(lambda: "rate_limited" in outcomes(db), what="the 429 recorded")
        clock.advance(0.9)
        assert fake.stats()["deliveries"] == 0
        clock.advance(0.1)  # the cap has passed: the others go out, then the refused row
        wait_for(lambda: fake.stats()["deliveries"] == 3)
        stop.set()
    [paused] = [r for r in caplog.records if r.getMessage().startswith("provider asked us")]
    fields = paused.receipts_fields  # type: ignore[attr-defined]
    assert fields["capped"] is True and fields["pause_seconds"] == 1.0
    assert fields["asked_seconds"] == (86400 if retry_after == "86400" else "inf")


def test_a_run_whose_every_send_failed_has_its_own_exit_code(
    db: DB, worker_settings: Settings
) -> None:
    """Resend unreachable: every send is a retry, the run exits 5 (not 0), and the
    rows are pending with the attempt counted."""
    insert_pending(db, 3)
    down = replace(worker_settings, resend_api_url="http://127.0.0.1:9")
    summary = work(down, concurrency=2)
    assert summary.retried == 3 and summary.final_exit_code() == ExitCode.PROVIDER_FAILING


def test_one_answer_from_a_working_provider_is_not_a_failing_run(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """A 5xx among accepted sends is an ordinary retry: exit 0."""
    insert_pending(db, 3)
    fake.script({"status": 500})
    summary = work(worker_settings, concurrency=1)
    assert (summary.retried, summary.sent, summary.final_exit_code()) == (1, 2, ExitCode.OK)
