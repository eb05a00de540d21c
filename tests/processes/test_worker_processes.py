"""``receipts worker`` as real processes: racing workers, SIGKILL, SIGTERM, exit codes.

The fake provider runs as a process of its own (``python -m tests.fake_provider``),
as it would for a fleet of workers. Runs that no signal or race is aimed at (the
exit codes, the run after a crash) go through the same command line in the
test's own process (tests/worker_runs.py): a Python start-up saved per run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.fake_provider import FakeProviderClient
from tests.helpers import wait_for
from tests.outbox_states import insert_pending
from tests.outbox_states import row as outbox_row
from tests.real_processes import finish, start_worker
from tests.worker_runs import worker_command

Row = dict[str, Any]
DB = psycopg.Connection[Row]
API_KEY = "re_process_test"
RECEIPTS = [sys.executable, "-m", "receipts.cli"]


@pytest.fixture
def fake() -> Iterator[FakeProviderClient]:
    """The fake provider in its own process, on a free port."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_provider", "--port", "0", "--api-key", API_KEY],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("listening on "), line
    try:
        yield FakeProviderClient(line.split()[-1])
    finally:
        process.terminate()
        process.wait(timeout=10)


def claiming_workers(db: DB) -> int:
    """How many worker processes have claimed rows (an attempt each) so far."""
    row = db.execute("SELECT count(DISTINCT worker_id) AS n FROM email_attempts").fetchone()
    return row["n"] if row else 0


def released_attempts(db: DB) -> int:
    row = db.execute(
        "SELECT count(*) AS n FROM email_attempts WHERE outcome = 'released'"
    ).fetchone()
    return row["n"] if row else 0


def worker_env(database_url: str, fake: FakeProviderClient, **extra: str) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "DATABASE_URL": database_url,
        "RESEND_API_KEY": API_KEY,
        "RESEND_API_URL": fake.url,
        "RECEIPTS_PROVIDER_TIMEOUT": "2",
        "RECEIPTS_PROVIDER_CONNECT_TIMEOUT": "1",
        "RECEIPTS_SEND_RATE": "0",
        "LOG_FORMAT": "json",
    }
    env.update(extra)
    return env


def test_two_workers_racing_over_1000_rows_request_and_deliver_each_key_once(
    db: DB, database_url: str, fake: FakeProviderClient
) -> None:
    """SKIP LOCKED + leases: two processes never send the same row; a third run has nothing.

    Every request is held at the provider until both processes have claimed
    rows, so that both race over the rest (neither can drain it alone first)."""
    keys = insert_pending(db, 1000)
    fake.configure(hold="start")
    env = worker_env(database_url, fake, RECEIPTS_PROVIDER_TIMEOUT="10")
    workers = [start_worker(env, "--concurrency", "8") for _ in range(2)]
    try:
        wait_for(lambda: claiming_workers(db) == 2, what="both workers to claim rows")
    finally:
        fake.release("start")
    results = [finish(worker) for worker in workers]
    assert [code for code, _, _ in results] == [0, 0], [err for _, _, err in results]
    stats = fake.stats()
    assert stats["requests_by_key"] == dict.fromkeys(keys, 1)
    assert stats["deliveries_by_key"] == dict.fromkeys(keys, 1)
    assert db.execute("SELECT status, count(*) AS n FROM email_outbox GROUP BY 1").fetchall() == [
        {"status": "sent", "n": 1000}
    ]
    sent_by_each = [int(out.split("sent=")[1].split()[0]) for _, out, _ in results]
    assert sum(sent_by_each) == 1000 and min(sent_by_each) > 0
    code, out, _ = worker_command(env)
    assert code == 0 and "sent=0 " in out
    assert fake.stats()["requests"] == 1000


def test_a_worker_killed_after_the_provider_accepted_is_replayed_without_a_second_delivery(
    db: DB, database_url: str, fake: FakeProviderClient
) -> None:
    """SIGKILL between acceptance and recording: the next run replays the same key."""
    [key] = insert_pending(db, 1)
    fake.script({"hold_answer": "answer"})  # delivered; answered once the worker is killed
    env = worker_env(database_url, fake, RECEIPTS_PROVIDER_TIMEOUT="10")
    worker = start_worker(env)
    wait_for(lambda: fake.held("answer") == 1, what="the delivery, its answer held")
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    fake.release("answer")
    row = outbox_row(db, key)
    assert row["status"] == "processing" and row["provider_id"] is None
    [ambiguous] = db.execute("SELECT * FROM email_attempts").fetchall()
    assert ambiguous["outcome"] is None and ambiguous["finished_at"] is None
    wait_for(lambda: fake.stats()["in_flight"] == 0)

    db.execute("UPDATE email_outbox SET locked_until = now() - interval '1 second'")
    code, _, err = worker_command(env)
    assert code == 0, err
    stats = fake.stats()
    [delivery] = fake.deliveries()
    assert stats["deliveries"] == 1 and stats["requests"] == 2 and stats["replays"] == 1
    row = outbox_row(db, key)
    assert (row["status"], row["provider_id"], row["attempts"]) == ("sent", delivery["id"], 2)
    outcomes = [r["outcome"] for r in db.execute("SELECT outcome FROM email_attempts ORDER BY id")]
    assert outcomes == [None, "sent"]


def test_loop_worker_sends_new_rows_and_exits_0_on_sigterm(
    db: DB, database_url: str, fake: FakeProviderClient
) -> None:
    """The row is inserted without a NOTIFY: the polling fallback finds it."""
    env = worker_env(database_url, fake)
    worker = start_worker(env, "--loop", "--poll-seconds", "0.2")
    try:
        [key] = insert_pending(db, 1)
        wait_for(lambda: outbox_row(db, key)["status"] == "sent")
    finally:
        worker.send_signal(signal.SIGTERM)
    code, out, err = finish(worker, timeout=20)
    assert code == 0, err
    assert "sent=1 " in out


def test_sigterm_during_sends_finishes_or_releases_every_row(
    db: DB, database_url: str, fake: FakeProviderClient
) -> None:
    """SIGTERM to a looping worker mid-send: the send in flight finishes, the claimed
    rows waiting for their slot are let go unsent, it exits 0, every row is sent
    or pending, and no attempt is left without an outcome. (A slot every 21 s:
    the first send is held at the provider, the other rows wait for a slot.)"""
    insert_pending(db, 40)
    fake.script({"hold": "in-flight"})
    env = worker_env(database_url, fake, RECEIPTS_PROVIDER_TIMEOUT="10",
                     RECEIPTS_SEND_RATE="0.05", RECEIPTS_LEASE_SECONDS="600")  # fmt: skip
    worker = start_worker(env, "--loop", "--concurrency", "4")
    try:
        wait_for(lambda: fake.held("in-flight") == 1)
        worker.send_signal(signal.SIGTERM)
        wait_for(lambda: released_attempts(db) > 0, what="the waiting rows let go")
    finally:
        fake.release("in-flight")
    code, _, err = finish(worker, timeout=20)
    assert code == 0, err
    statuses = {
        r["status"]: r["n"]
        for r in db.execute("SELECT status, count(*) AS n FROM email_outbox GROUP BY 1")
    }
    assert statuses == {"sent": 1, "pending": 39}
    unfinished = db.execute(
        "SELECT count(*) AS n FROM email_attempts WHERE outcome IS NULL"
    ).fetchone()
    assert unfinished == {"n": 0}


def test_a_refused_api_key_exits_2_naming_it_and_leaves_rows_pending(
    db: DB, database_url: str, fake: FakeProviderClient
) -> None:
    """A revoked API key (403): exit code 2, stderr names RESEND_API_KEY and the
    status, and every row is pending with no attempt spent."""
    insert_pending(db, 10)
    env = worker_env(database_url, fake, RESEND_API_KEY="re_revoked")
    code, _, err = worker_command(env)
    assert code == 2
    assert "RESEND_API_KEY" in err and "403" in err
    assert db.execute(
        "SELECT status, sum(attempts) AS a FROM email_outbox GROUP BY 1"
    ).fetchall() == [{"status": "pending", "a": 0}]


def run_command(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RECEIPTS, *args], env=env, capture_output=True, text=True, timeout=60)


def test_a_quota_pauses_every_worker_process_and_status_says_until_when(
    db: DB, database_url: str, fake: FakeProviderClient
) -> None:
    """The fake's daily quota (3) runs out: the first worker process sends 3 and exits 4
    with one line naming the quota; a second process, started afterwards, sends nothing
    and exits 4 the same way; `receipts status` says "sending paused: daily quota until"
    and exits 1; no attempt of the waiting rows was spent. After the plan is upgraded,
    `receipts worker --resume` lifts the pause and sends the rest."""
    insert_pending(db, 8)
    fake.configure(daily_quota=3)
    env = worker_env(database_url, fake)
    code, out, err = worker_command(env, "--concurrency", "2")
    assert code == 4, err
    assert "sent=3 " in out
    [line] = [line for line in err.splitlines() if line.startswith("receipts worker: stopped")]
    assert line.startswith("receipts worker: stopped: sending paused: daily quota until ")
    assert line.endswith("UTC (HTTP 429 daily_quota_exceeded)")
    requests_after_first = fake.stats()["requests"]

    code, out, err = worker_command(env)
    assert code == 4 and "sent=0 " in out
    assert "receipts worker: stopped: sending paused: daily quota until " in err
    assert fake.stats()["requests"] == requests_after_first

    status = run_command(env, "status")
    assert status.returncode == 1
    assert "NEEDS A PERSON: sending paused: daily quota until " in status.stdout
    assert db.execute(
        "SELECT count(*) AS n, sum(attempts) AS spent FROM email_outbox WHERE status = 'pending'"
    ).fetchone() == {"n": 5, "spent": 0}

    fake.configure(daily_quota=None)
    code, out, err = worker_command(env, "--resume")
    assert code == 0, err
    assert "lifted: sending paused: daily quota until" in err and "sent=5 " in out
    assert run_command(env, "status").returncode == 0


def test_a_provider_failing_every_send_exits_5_naming_it(db: DB, database_url: str) -> None:
    """Resend unreachable: exit 5 with one line saying every send failed (a cron job
    failing every minute no longer looks healthy); the rows wait as pending."""
    insert_pending(db, 3)
    env = worker_env(database_url, FakeProviderClient("http://127.0.0.1:9"))
    code, out, err = worker_command(env)
    assert code == 5, err
    assert "retried=3 " in out
    assert "receipts worker: provider failing: every one of 3 send(s) failed" in err


def test_a_wrong_resend_api_url_exits_2_naming_it_and_spends_no_attempt(
    db: DB, database_url: str, fake: FakeProviderClient
) -> None:
    """RESEND_API_URL with a wrong path answers 404 not_found: exit 2 naming
    RESEND_API_URL, one request, every row pending with no attempt spent."""
    insert_pending(db, 10)
    env = worker_env(database_url, fake, RESEND_API_URL=fake.url + "/v1")
    code, _, err = worker_command(env)
    assert code == 2 and "RESEND_API_URL" in err and "HTTP 404 not_found" in err
    assert db.execute(
        "SELECT status, sum(attempts) AS a FROM email_outbox GROUP BY 1"
    ).fetchall() == [{"status": "pending", "a": 0}]


def test_an_api_key_that_is_not_a_key_stops_at_start_naming_it(
    db: DB, database_url: str, fake: FakeProviderClient
) -> None:
    """A key with a character outside Latin-1 used to fail inside every send (0
    requests, exit 0); now the worker stops before any, with one line naming it."""
    insert_pending(db, 2)
    env = worker_env(
        database_url, fake, RESEND_API_KEY="re_k\u00e9y".encode().decode("unicode_escape")
    )
    code, out, err = worker_command(env)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        "receipts: configuration error: RESEND_API_KEY: must be a Resend API key: re_ followed "
        "by printable ASCII characters (no spaces or quotes)"
    ]
    assert fake.stats()["requests"] == 0


def test_no_provider_configured_exits_2_naming_resend_api_key(database_url: str) -> None:
    """Neither RESEND_API_KEY nor RECEIPTS_MAIL_DIR: exit 2 with a message naming the key."""
    result = subprocess.run(
        [*RECEIPTS, "worker"],
        env={"PATH": os.environ.get("PATH", ""), "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and "RESEND_API_KEY" in result.stderr
