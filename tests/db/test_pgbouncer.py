"""Web ingest and the worker through a real PgBouncer in transaction pooling mode.

Most managed PostgreSQL offerings put PgBouncer in front of the database.
With ``RECEIPTS_DATABASE_POOLING=transaction`` the product prepares no
statement on the server and keeps no session state across transactions;
``receipts worker --loop`` LISTENs on ``DATABASE_DIRECT_URL``, or polls and
says so. The last test runs the whole ingest and worker suites through
PgBouncer (``RECEIPTS_TEST_THROUGH_PGBOUNCER=1``, ``tests/conftest.py``).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from receipts import queries
from receipts.cli import main
from receipts.config import Settings, load_settings
from receipts.db import Database, DatabaseUnavailable
from receipts.delivery.summary import WorkerSummary
from receipts.operations import privileges
from receipts.web import create_app
from tests import stripe_events
from tests.fake_provider import FakeProviderClient
from tests.helpers import METRICS_AUTH, METRICS_TOKEN, RUN_TEMP_DIR, wait_for
from tests.outbox_states import Db, insert_pending
from tests.pgbouncer import PgBouncer
from tests.stripe_events import TEST_SECRET, encode, sign
from tests.worker_runs import API_KEY, work

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pooled_url(pgbouncer: PgBouncer, direct_database_url: str) -> str:
    return pgbouncer.url_for(direct_database_url)


def settings_through(pooled_url: str, fake: FakeProviderClient, **more: str) -> Settings:
    return load_settings(
        {
            "DATABASE_URL": pooled_url,
            "RECEIPTS_DATABASE_POOLING": "transaction",
            "STRIPE_WEBHOOK_SECRET": TEST_SECRET,
            "EMAIL_FROM": "Billing <billing@example.com>",
            "RESEND_API_KEY": API_KEY,
            "RESEND_API_URL": fake.url,
            "RECEIPTS_METRICS_TOKEN": METRICS_TOKEN,
            "RECEIPTS_SEND_RATE": "0",  # the pooler, not the pace, is under test
            **more,
        }
    )


def take_turns(database: Database, rounds: int = 6) -> None:
    """Two pooled connections taking turns: through PgBouncer they share one server
    connection, so a statement psycopg prepared through one is the other's too."""
    statement = queries.load("ingest")["outbox_fingerprint"]
    with database.autocommit() as first, database.autocommit() as second:
        for _ in range(rounds):
            for conn in (first, second):
                conn.execute(statement, {"key": "platform/test/in_1X/invoice-paid"})


def test_prepared_statements_break_behind_pgbouncer_and_the_setting_avoids_them(
    pooled_url: str,
) -> None:
    """With psycopg's server-side prepared statements the second connection finds the
    first's statement name taken; with RECEIPTS_DATABASE_POOLING=transaction (no
    prepared statements) all succeed."""
    preparing = Database(pooled_url, max_size=2, prepared_statements=True)
    plain = Database(pooled_url, max_size=2, prepared_statements=False)
    try:
        with pytest.raises(DatabaseUnavailable) as refused:
            take_turns(preparing)
        assert isinstance(refused.value.__cause__, psycopg.errors.DuplicatePreparedStatement)
        take_turns(plain)
    finally:
        preparing.close()
        plain.close()


def test_a_pool_that_finds_a_pooler_stops_preparing_and_says_what_to_set(
    pooled_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """RECEIPTS_DATABASE_POOLING unset behind PgBouncer: the borrow that meets the clash
    is unavailable (a webhook answers 503 and Stripe sends it again), the log names the
    setting once, and every later borrow works on the same pool."""
    database = Database(pooled_url, max_size=2, prepared_statements=True)
    try:
        with caplog.at_level(logging.WARNING, logger="receipts.db"):
            with pytest.raises(DatabaseUnavailable) as refused:
                take_turns(database)
            assert refused.value.reason == "pooler_prepared_statements"
            for _ in range(3):
                take_turns(database, rounds=10)
    finally:
        database.close()
    [warning] = [r.getMessage() for r in caplog.records if r.name == "receipts.db"]
    assert "RECEIPTS_DATABASE_POOLING=transaction" in warning


def test_concurrent_webhooks_are_ingested_through_pgbouncer(
    pooled_url: str, fake: FakeProviderClient, db: Db
) -> None:
    """200 signed deliveries (100 events, each twice) from 16 threads through the
    app's pool and PgBouncer: every one 200, 100 rows, each event counting 2."""
    app = create_app(settings_through(pooled_url, fake))
    client_lock = threading.Lock()
    events = [stripe_events.event(stripe_events.invoice()) for _ in range(100)]

    def deliver(event: dict[str, Any]) -> int:
        body = encode(event)
        with client_lock:
            client = app.test_client()
        return client.post(
            "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
        ).status_code

    try:
        with ThreadPoolExecutor(max_workers=16) as pool:
            statuses = list(pool.map(deliver, events + events))
        metrics = app.test_client().get("/metrics", headers=METRICS_AUTH).get_data(as_text=True)
    finally:
        app.extensions["receipts"].database.close()
    assert statuses == [200] * 200
    assert db.execute("SELECT count(*) AS n FROM email_outbox").fetchone() == {"n": 100}
    assert db.execute(
        "SELECT count(*) AS n FROM stripe_events WHERE deliveries = 2"
    ).fetchone() == {"n": 100}
    assert "receipts_database_up 1.0" in metrics


def test_the_cron_worker_drains_through_pgbouncer(
    pooled_url: str, fake: FakeProviderClient, db: Db
) -> None:
    """A drain of 300 rows (many claims and records per pooled connection) sends each once."""
    insert_pending(db, 300)
    settings = settings_through(pooled_url, fake)
    summary = work(settings, concurrency=8)
    assert (summary.sent, summary.error) == (300, None)
    assert fake.stats()["deliveries"] == 300
    assert db.execute(
        "SELECT count(*) AS n FROM email_outbox WHERE status = 'sent'"
    ).fetchone() == {"n": 300}


def _loop(settings: Settings, stop: threading.Event, poll_seconds: float) -> list[WorkerSummary]:
    result: list[WorkerSummary] = []

    def run() -> None:
        result.append(
            work(settings, concurrency=2, loop=True, stop_event=stop, poll_seconds=poll_seconds)
        )

    threading.Thread(target=run, daemon=True).start()
    return result


def test_the_loop_worker_listens_on_the_direct_url(
    pooled_url: str, direct_database_url: str, fake: FakeProviderClient, db: Db
) -> None:
    """Claims go through PgBouncer; LISTEN on DATABASE_DIRECT_URL wakes the worker at
    once although it polls only every 60 s."""
    settings = settings_through(pooled_url, fake, DATABASE_DIRECT_URL=direct_database_url)
    stop = threading.Event()
    result = _loop(settings, stop, poll_seconds=60)
    try:
        wait_for(lambda: _listening(db), what="the worker's LISTEN on the direct URL")
        app = create_app(settings)
        try:
            body = encode(stripe_events.event(stripe_events.invoice(id="in_1Woken")))
            app.test_client().post(
                "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
            )
        finally:
            app.extensions["receipts"].database.close()
        # Well within the 60 s poll: only the NOTIFY can have woken it.
        wait_for(lambda: fake.stats()["deliveries"] == 1, timeout=30, what="the woken send")
    finally:
        stop.set()
        wait_for(lambda: bool(result), what="the worker to stop")
    assert result[0].sent == 1


def test_without_a_direct_url_the_loop_worker_polls_and_says_so(
    pooled_url: str, fake: FakeProviderClient, db: Db, caplog: pytest.LogCaptureFixture
) -> None:
    """RECEIPTS_DATABASE_POOLING=transaction and no DATABASE_DIRECT_URL: no LISTEN is
    attempted (PgBouncer would forget it), a warning names DATABASE_DIRECT_URL, and
    rows are still sent by polling."""
    caplog.set_level(logging.INFO, logger="receipts")
    settings = settings_through(pooled_url, fake)
    stop = threading.Event()
    result = _loop(settings, stop, poll_seconds=0.3)
    try:
        insert_pending(db, 3)
        wait_for(lambda: fake.stats()["deliveries"] == 3, what="polled sends")
    finally:
        stop.set()
        wait_for(lambda: bool(result), what="the worker to stop")
    assert not _listening(db)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("set DATABASE_DIRECT_URL" in message for message in warnings), warnings


def _listening(db: Db) -> bool:
    first_line = queries.load("delivery")["listen"].splitlines()[0]
    found = db.execute(
        "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
        "AND starts_with(query, %s)",
        (first_line,),
    ).fetchone()
    return found is not None


def test_operator_commands_and_the_privilege_check_work_through_pgbouncer(
    pooled_url: str, fake: FakeProviderClient, db: Db, capsys: Any
) -> None:
    """status, show and review list run through PgBouncer; so does the privilege check
    `receipts doctor` makes (its PREPARE lives and dies inside one transaction)."""
    insert_pending(db, 2)
    environ = {"DATABASE_URL": pooled_url, "RECEIPTS_DATABASE_POOLING": "transaction"}
    assert main(["status"], environ) == 0
    assert main(["show", "platform/test/in_1Work000001/invoice-paid"], environ) == 0
    assert main(["review", "list"], environ) == 0
    capsys.readouterr()
    with psycopg.connect(pooled_url, row_factory=dict_row, prepare_threshold=None) as conn:
        for process in ("web", "worker", "operator"):
            assert privileges.refusals(conn, process) == [], process


@pytest.mark.slow
def test_the_ingest_and_worker_suites_pass_through_pgbouncer(pgbouncer: PgBouncer) -> None:
    """tests/db/test_web.py and tests/db/test_worker.py, whole, with every database
    reached through PgBouncer in transaction mode (RECEIPTS_TEST_THROUGH_PGBOUNCER=1).

    Slow (about as long as the rest of the database tier on two cores): the
    default run has the tests above; ``pytest -m slow`` (and .ci/run) runs this."""
    # The run's own PgBouncer runs as its own system user: it keeps its files in the
    # temp directory of this run, not in this test's private one.
    environment = {**os.environ, "RECEIPTS_TEST_THROUGH_PGBOUNCER": "1", "PYTHONPATH": str(ROOT),
                   "TMPDIR": str(RUN_TEMP_DIR)}  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "-m", "not slow",
         "tests/db/test_web.py", "tests/db/test_worker.py"],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and " skipped" not in result.stdout.splitlines()[-1]
