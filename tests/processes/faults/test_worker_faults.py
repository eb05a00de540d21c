"""Crash points of sending, on real ``receipts worker`` processes.

The worker reaches PostgreSQL through a TCP proxy the test controls and the
provider is the fake Resend API in a process of its own. Crashes are SIGKILLs
sent at a moment the test observes from outside: the claim's COMMIT being
acknowledged, the provider holding a request, the outcome's UPDATE on its way
to PostgreSQL. Expired leases are simulated by ageing ``locked_until`` with
SQL instead of waiting for them.

Every case ends with the same check: nothing lost (each receipt ends ``sent``
with the id of its one delivery, or in ``review`` with a reason) and nothing
doubled (deliveries per key at the provider), except the one documented
duplicate, which must be visible in the attempt log.
"""

from __future__ import annotations

import signal
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Json

from receipts.ingest.verification import decode_event
from receipts.receipt.derivation import ReceiptJob, derive_receipt
from tests import stripe_events
from tests.fake_provider import FakeProviderClient
from tests.fault_lab import (
    CLAIM_SQL,
    LISTEN_SQL,
    READY_IDLE,
    RECORD_SQL,
    age_leases,
    assert_nothing_lost_nothing_doubled,
    attempt_log,
    kill,
    statuses,
)
from tests.helpers import wait_for
from tests.outbox_states import insert_pending
from tests.real_processes import finish, start_worker, worker_environ
from tests.stripe_events import encode
from tests.tcp_proxy import TcpProxy, Verdict, through_proxy
from tests.worker_runs import worker_command

Row = dict[str, Any]
Db = psycopg.Connection[Row]


def run_worker(environ: dict[str, str], *args: str) -> str:
    """A run that is not crashed (the one after a crash): the command, in this process."""
    code, out, err = worker_command(environ, *args)
    assert code == 0, err
    return out


@pytest.fixture
def proxied_environ(
    database_url: str, db_proxy: TcpProxy, fake_provider: FakeProviderClient
) -> dict[str, str]:
    return worker_environ(through_proxy(database_url, db_proxy), fake_provider)


@pytest.fixture
def direct_environ(database_url: str, fake_provider: FakeProviderClient) -> dict[str, str]:
    return worker_environ(database_url, fake_provider)


def test_worker_killed_after_claim_before_the_request_sends_once_after_the_lease(
    db: Db,
    db_proxy: TcpProxy,
    fake_provider: FakeProviderClient,
    proxied_environ: dict[str, str],
    direct_environ: dict[str, str],
) -> None:
    """SIGKILL the moment PostgreSQL has committed the claim: the row
    is leased, its attempt logged as unfinished, and the provider has seen
    nothing. When the lease expires the next run sends it once."""
    [key] = insert_pending(db, 1, prefix="in_1Claimed")
    worker = start_worker(proxied_environ)
    db_proxy.on_answer_to(CLAIM_SQL, READY_IDLE, kill(worker))
    assert worker.wait(timeout=30) == -signal.SIGKILL
    assert statuses(db) == {"processing": 1}
    assert attempt_log(db, key) == [
        {"attempt": 1, "outcome": None, "http_status": None, "unfinished": True}
    ]
    assert fake_provider.stats()["requests"] == 0

    age_leases(db)
    run_worker(direct_environ)
    assert fake_provider.stats()["requests"] == 1
    assert [a["outcome"] for a in attempt_log(db, key)] == [None, "sent"]
    assert_nothing_lost_nothing_doubled(db, fake_provider, [key])


def test_worker_killed_between_a_first_claim_and_its_email_renders_it_after_the_lease(
    db: Db,
    db_proxy: TcpProxy,
    fake_provider: FakeProviderClient,
    proxied_environ: dict[str, str],
    direct_environ: dict[str, str],
) -> None:
    """A row stored as the webhook stores it (no email yet): SIGKILL once the claim
    has committed, before the email is frozen. The row is leased without an email;
    after the lease the next run renders it, freezes it and sends it once."""
    [key] = insert_pending(db, 1, prefix="in_1Unfrozen")
    invoice_id = key.split("/")[2]
    header, _ = decode_event(
        encode(stripe_events.event(stripe_events.invoice(id=invoice_id))).decode()
    )
    job = derive_receipt(header, email_from="Billing <billing@example.com>")
    assert isinstance(job, ReceiptJob)
    db.execute(
        "UPDATE email_outbox SET payload = NULL, render_input = %s WHERE message_key = %s",
        (Json(job.render_input), key),
    )
    worker = start_worker(proxied_environ)
    db_proxy.on_answer_to(CLAIM_SQL, READY_IDLE, kill(worker))
    assert worker.wait(timeout=30) == -signal.SIGKILL
    leased = db.execute("SELECT status, payload FROM email_outbox").fetchone()
    assert leased == {"status": "processing", "payload": None}
    assert fake_provider.stats()["requests"] == 0

    age_leases(db)
    run_worker(direct_environ)
    sent = db.execute("SELECT status, payload::text AS text FROM email_outbox").fetchone()
    assert sent is not None and sent["status"] == "sent"
    [delivery] = fake_provider.deliveries()
    assert delivery["body"] == sent["text"]
    assert_nothing_lost_nothing_doubled(db, fake_provider, [key])


def test_worker_killed_while_the_provider_holds_the_request_is_answered_409_then_replayed(
    db: Db,
    fake_provider: FakeProviderClient,
    direct_environ: dict[str, str],
) -> None:
    """SIGKILL while the provider is still working on the request (held at the
    fake until the test releases it; it then goes on and delivers). A looping
    worker that takes the row over meets 409 "request with this key in
    progress" and backs off; once the first request has been answered, a retry
    gets that answer replayed. One delivery."""
    [key] = insert_pending(db, 1, prefix="in_1Held")
    fake_provider.script({"hold": "first"})
    # Killed as soon as its request is held: long before its own timeout (10 s).
    first = start_worker({**direct_environ, "RECEIPTS_PROVIDER_TIMEOUT": "10"})
    wait_for(lambda: fake_provider.held("first") == 1, what="the first request held")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    second = start_worker(direct_environ, "--loop", "--poll-seconds", "0.2")
    try:
        wait_for(lambda: listening_workers(db) == 1)
        age_leases(db)
        wait_for(lambda: ("retry", 409) in outcomes(db, key), what="the takeover answered 409")
        assert fake_provider.stats()["deliveries"] == 0
        fake_provider.release("first")
        wait_for(lambda: statuses(db) == {"sent": 1})
    finally:
        fake_provider.release("first")
        second.send_signal(signal.SIGTERM)
    code, _, err = finish(second)
    assert code == 0, err
    log = [(a["outcome"], a["http_status"]) for a in attempt_log(db, key)]
    assert log[0] == (None, None) and log[-1] == ("sent", 200)
    assert ("retry", 409) in log[1:-1]
    assert fake_provider.stats()["replays"] == 1
    assert_nothing_lost_nothing_doubled(db, fake_provider, [key])


def outcomes(db: Db, key: str) -> list[tuple[str | None, int | None]]:
    return [(a["outcome"], a["http_status"]) for a in attempt_log(db, key)]


def timeouts(db: Db) -> int:
    row = db.execute(
        "SELECT count(*) AS n FROM email_attempts WHERE provider_error = 'timeout'"
    ).fetchone()
    return row["n"] if row else 0


def listening_workers(db: Db) -> int:
    """Connections of this database whose last statement was the worker's LISTEN."""
    row = db.execute(
        "SELECT count(*) AS n FROM pg_stat_activity"
        " WHERE starts_with(query, %s) AND datname = current_database()",
        (LISTEN_SQL.decode(),),
    ).fetchone()
    return row["n"] if row else 0


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "no-idempotency"])
def test_worker_killed_after_acceptance_before_the_outcome_is_written(
    db: Db,
    db_proxy: TcpProxy,
    fake_provider: FakeProviderClient,
    proxied_environ: dict[str, str],
    direct_environ: dict[str, str],
    idempotent: bool,
) -> None:
    """The provider accepted and answered; SIGKILL as the worker's UPDATE with
    that answer goes out to PostgreSQL. The attempt stays unfinished (the
    ambiguous attempt) and the lease expires. With the provider's idempotency
    the retry is replayed: one delivery. Without it (a provider that forgot the
    key) the retry delivers a second copy: the documented duplicate, visible
    as two deliveries of one key and an unfinished attempt before the sent one."""
    fake_provider.configure(idempotency=idempotent)
    [key] = insert_pending(db, 1, prefix="in_1Accepted")
    worker = start_worker(proxied_environ)
    db_proxy.on_client_bytes(RECORD_SQL, kill(worker))
    assert worker.wait(timeout=30) == -signal.SIGKILL
    assert statuses(db) == {"processing": 1}
    assert fake_provider.stats()["deliveries"] == 1

    age_leases(db)
    run_worker(direct_environ)
    assert attempt_log(db, key) == [
        {"attempt": 1, "outcome": None, "http_status": None, "unfinished": True},
        {"attempt": 2, "outcome": "sent", "http_status": 200, "unfinished": False},
    ]
    assert fake_provider.stats()["replays"] == (1 if idempotent else 0)
    assert_nothing_lost_nothing_doubled(
        db, fake_provider, [key], deliveries_per_key=1 if idempotent else 2
    )


# Past the retry cutoff the same crash is looked up in Resend's sent list:
# tests/processes/faults/test_provider_guarantees.py.


def test_database_cut_in_the_middle_of_a_batch_nothing_half_written_batch_resumes(
    db: Db,
    db_proxy: TcpProxy,
    fake_provider: FakeProviderClient,
    proxied_environ: dict[str, str],
) -> None:
    """A looping worker is halfway through 60 rows when every connection to
    PostgreSQL is reset and new ones are refused for half a second (as in a
    database restart). Answers it could not record leave their rows leased;
    once those leases expire the same process, never restarted, replays them.
    Every row ends sent with its one delivery; no row is sent without a
    provider id, and every attempt is either finished or the ambiguous one."""
    keys = insert_pending(db, 60, prefix="in_1Cut")
    # Fifteen answered at once, then four held in flight: the cut lands mid-batch.
    fake_provider.script(*[{}] * 15, *[{"hold": "cut"}] * 45)
    environ = {**proxied_environ, "RECEIPTS_PROVIDER_TIMEOUT": "10"}
    worker = start_worker(environ, "--loop", "--concurrency", "4", "--poll-seconds", "0.2")
    try:
        wait_for(lambda: fake_provider.held("cut") == 4, what="four sends held mid-batch")
        assert fake_provider.stats()["deliveries"] == 15
        db_proxy.refuse(True)
        assert db_proxy.cut() > 0
        fake_provider.release("cut")  # their answers come back while the database is away
        wait_for(lambda: fake_provider.stats()["in_flight"] == 0)
        refused = db_proxy.connections_refused
        wait_for(lambda: db_proxy.connections_refused > refused, what="a reconnect refused")
        db_proxy.refuse(False)

        wait_for(lambda: "pending" not in statuses(db))
        wait_for(lambda: fake_provider.stats()["in_flight"] == 0)
        age_leases(db)
        wait_for(lambda: statuses(db) == {"sent": 60})
    finally:
        worker.send_signal(signal.SIGTERM)
    code, _, err = finish(worker)
    assert code == 0, err
    assert_nothing_lost_nothing_doubled(db, fake_provider, keys)
    half_written = db.execute(
        """SELECT count(*) AS n FROM email_attempts
            WHERE (outcome IS NULL) <> (finished_at IS NULL)"""
    ).fetchone()
    assert half_written == {"n": 0}


# Each answer's effect on the row is proven in-process (tests/db/test_worker.py,
# tests/db/test_provider_answers.py); this runs them through a looping process.
@pytest.mark.slow
@pytest.mark.parametrize(
    ("answers", "environ_extra"),
    [
        pytest.param(
            [{"hold": "slow"}], {"RECEIPTS_PROVIDER_TIMEOUT": "0.3"}, id="slower-than-timeout"
        ),
        pytest.param(
            [{"status": status} for status in (500, 502, 503, 500, 500, 504) * 3],
            {},
            id="5xx-storm",
        ),
        pytest.param(
            [{"status": 429, "headers": {"Retry-After": "1"}, "name": "rate_limit_exceeded"}] * 2,
            {},
            id="429-retry-after",
        ),
    ],
)
def test_provider_trouble_ends_with_one_delivery_per_receipt(
    db: Db,
    fake_provider: FakeProviderClient,
    direct_environ: dict[str, str],
    answers: list[dict[str, Any]],
    environ_extra: dict[str, str],
) -> None:
    """A timeout while the provider still delivers (the request is held until the
    worker has timed out, then delivered), a storm of 5xx, 429 with Retry-After:
    a looping worker keeps retrying with the same key until every receipt is
    sent, and each is delivered exactly once."""
    keys = insert_pending(db, 12, prefix="in_1Trouble")
    fake_provider.script(*answers)
    worker = start_worker(
        {**direct_environ, **environ_extra}, "--loop", "--concurrency", "4", "--poll-seconds", "0.2"
    )
    try:
        if any("hold" in answer for answer in answers):
            wait_for(lambda: timeouts(db) > 0, what="the worker to time out")
            fake_provider.release("slow")
        wait_for(lambda: statuses(db) == {"sent": 12}, timeout=40)
    finally:
        fake_provider.release("slow")
        worker.send_signal(signal.SIGTERM)
    code, _, err = finish(worker)
    assert code == 0, err
    assert_nothing_lost_nothing_doubled(db, fake_provider, keys)
    # A 429 is logged rate_limited (its attempt refunded), the others retry.
    retried = db.execute(
        "SELECT count(*) AS n FROM email_attempts WHERE outcome IN ('retry', 'rate_limited')"
    ).fetchone()
    assert retried is not None and retried["n"] >= len(answers)


@pytest.mark.slow
def test_racing_worker_processes_request_every_key_once(
    db: Db, fake_provider: FakeProviderClient, direct_environ: dict[str, str]
) -> None:
    """Four worker processes started together over the same 2,000 rows: SKIP
    LOCKED and leases mean each key is requested exactly once. (Two processes:
    tests/processes/test_worker_processes.py.)"""
    processes = 4
    keys = insert_pending(db, 2000, prefix="in_1Race")
    workers = [start_worker(direct_environ, "--concurrency", "8") for _ in range(processes)]
    results = [finish(worker, timeout=120) for worker in workers]
    assert [code for code, _, _ in results] == [0] * processes, [err for _, _, err in results]
    assert fake_provider.stats()["requests_by_key"] == dict.fromkeys(keys, 1)
    assert_nothing_lost_nothing_doubled(db, fake_provider, keys)
    sent_by_each = [int(out.split("sent=")[1].split()[0]) for _, out, _ in results]
    assert sum(sent_by_each) == 2000


@pytest.mark.slow
def test_max_seconds_bounds_a_run_whose_database_path_hangs(
    db: Db, db_proxy: TcpProxy, fake_provider: FakeProviderClient, proxied_environ: dict[str, str]
) -> None:
    """A cron run with --max-seconds 1 whose database path stalls in its first claim
    (bytes ACKed, never answered): it exits 1 with one line saying why, soon after
    the bound (max + one send's timeouts + 2 s), instead of waiting on the path (the
    red team's run was still there after 62 s). Marked slow: it waits out the bound."""
    insert_pending(db, 1, prefix="in_1Hang")
    db_proxy.on_client_bytes(b"WITH expired AS MATERIALIZED", lambda: _stall(db_proxy))
    environ = {
        **proxied_environ,
        "RECEIPTS_PROVIDER_TIMEOUT": "0.5",
        "RECEIPTS_PROVIDER_CONNECT_TIMEOUT": "0.5",
    }
    code, _, err = finish(start_worker(environ, "--max-seconds", "1"), timeout=30)
    assert code == 1, err
    assert "past --max-seconds" in err and "Traceback" not in err


def _stall(proxy: TcpProxy) -> Verdict:
    proxy.stall(True)
    proxy.silence(True)
    return "forward"
