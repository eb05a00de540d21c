"""Each provider's guarantee when a real ``receipts worker`` process dies.

Postmark (the fake Postmark API, whose search index lags behind), SMTP (a
real aiosmtpd server) and Resend past its key window (the fake Resend's sent
list). The same crash for each: the provider accepted the message and the
worker is SIGKILLed as it writes that down (its UPDATE on the way to
PostgreSQL, seen by the TCP proxy), so the attempt stays unfinished. After
the lease the next run (the command run in this process) settles it:
Postmark's search finds the message and the receipt is sent with its
MessageID, nothing sent again; Resend past 24 h finds it in the sent list;
SMTP cannot be asked, so the receipt goes to review, never twice. The same
providers without a crash: tests/db/test_provider_runs.py.
docs/architecture.md, "Providers and their guarantees".
"""

from __future__ import annotations

import signal
from typing import Any

import psycopg
import pytest

from tests.fake_postmark import FakePostmarkClient
from tests.fake_provider import FakeProviderClient
from tests.fault_lab import (
    CLAIM_SQL,
    READY_IDLE,
    RECORD_SQL,
    age_leases,
    attempt_log,
    kill,
    statuses,
)
from tests.outbox_states import insert_pending
from tests.provider_runs import (
    drain,
    last_attempt,
    outbox,
    postmark_environ,
    smtp_environ,
    wait_until_searchable,
)
from tests.real_processes import start_worker, worker_environ
from tests.smtp_server import SmtpServer
from tests.tcp_proxy import TcpProxy, through_proxy
from tests.worker_runs import worker_command

Row = dict[str, Any]
Db = psycopg.Connection[Row]


def crash_after_acceptance(db: Db, db_proxy: TcpProxy, environment: dict[str, str]) -> None:
    """One drain run, SIGKILLed as it writes the provider's answer; then its lease ends."""
    worker = start_worker(environment)
    db_proxy.on_client_bytes(RECORD_SQL, kill(worker))
    assert worker.wait(timeout=30) == -signal.SIGKILL
    assert statuses(db) == {"processing": 1}
    age_leases(db)


# --- Postmark --------------------------------------------------------------------


def test_postmark_killed_after_acceptance_is_found_by_search_and_not_sent_again(
    db: Db, database_url: str, db_proxy: TcpProxy, postmark: FakePostmarkClient
) -> None:
    [key] = insert_pending(db, 1, prefix="in_1PmCrash")
    crash_after_acceptance(
        db, db_proxy, postmark_environ(through_proxy(database_url, db_proxy), postmark)
    )
    [delivery] = postmark.deliveries()
    wait_until_searchable(db)
    drain(postmark_environ(database_url, postmark))
    assert outbox(db) == [
        {"message_key": key, "status": "sent", "review_reason": None, "provider_id": delivery["id"]}
    ]
    assert postmark.stats()["deliveries"] == 1 and postmark.stats()["searches"] == 1
    assert [a["outcome"] for a in attempt_log(db, key)] == [None, "sent"]
    assert "found by Postmark's outbound search" in last_attempt(db)["provider_message"]


def test_postmark_search_refusing_the_token_stops_the_run_and_keeps_the_question(
    db: Db, database_url: str, db_proxy: TcpProxy, postmark: FakePostmarkClient
) -> None:
    """The search before a retry answers 401 / ErrorCode 10: the run stops naming
    POSTMARK_SERVER_TOKEN, the attempt is not counted and nothing is sent; the
    next run (token fixed) asks again and finds the first send."""
    [key] = insert_pending(db, 1, prefix="in_1PmToken")
    crash_after_acceptance(
        db, db_proxy, postmark_environ(through_proxy(database_url, db_proxy), postmark)
    )
    wait_until_searchable(db)
    postmark.script(searches=[{"status": 401, "error_code": 10}])
    code, _, err = worker_command(postmark_environ(database_url, postmark))
    assert code == 2, err
    assert "POSTMARK_SERVER_TOKEN" in err
    held = db.execute("SELECT status, attempts FROM email_outbox").fetchone()
    assert held == {"status": "pending", "attempts": 1}  # the refused ask is refunded
    assert postmark.stats()["deliveries"] == 1
    drain(postmark_environ(database_url, postmark))
    [delivery] = postmark.deliveries()
    assert outbox(db)[0]["provider_id"] == delivery["id"]
    assert [a["outcome"] for a in attempt_log(db, key)] == [None, "config_error", "sent"]


# --- SMTP ------------------------------------------------------------------------


def test_smtp_killed_after_acceptance_goes_to_review_and_is_never_sent_twice(
    db: Db, database_url: str, db_proxy: TcpProxy, smtp: SmtpServer
) -> None:
    [key] = insert_pending(db, 1, prefix="in_1SmtpCrash")
    crash_after_acceptance(db, db_proxy, smtp_environ(through_proxy(database_url, db_proxy), smtp))
    drain(smtp_environ(database_url, smtp))
    drain(smtp_environ(database_url, smtp))
    [row] = outbox(db)
    assert (row["status"], row["review_reason"]) == ("review", "ambiguous_smtp_send")
    assert len(smtp.messages) == 1
    assert [a["outcome"] for a in attempt_log(db, key)] == [None, "review"]


@pytest.mark.slow
def test_smtp_4xx_is_retried_and_5xx_goes_to_review_with_the_servers_reply(
    db: Db, database_url: str, smtp: SmtpServer
) -> None:
    environment = smtp_environ(database_url, smtp)
    [later] = insert_pending(db, 1, prefix="in_1SmtpLater")
    smtp.reply_to_data("451 4.3.0 Try again later")
    code, _, err = worker_command(environment)
    assert code == 5, err  # the one send was refused for now: exit 5, retried later
    db.execute("UPDATE email_outbox SET available_at = now() WHERE status = 'pending'")
    drain(environment)
    [refused] = insert_pending(db, 1, prefix="in_1SmtpRefused")
    smtp.refuse_recipient("jenny.rosen@example.com", "550 5.1.1 No such user here")
    drain(environment)
    rows = {row["message_key"]: row for row in outbox(db)}
    assert rows[later]["status"] == "sent"
    assert [a["outcome"] for a in attempt_log(db, later)] == ["retry", "sent"]
    assert (rows[refused]["status"], rows[refused]["review_reason"]) == ("review", "smtp_550")
    reply = db.execute(
        "SELECT outcome, provider_message FROM email_attempts WHERE message_key = %s", (refused,)
    ).fetchone()
    assert reply == {"outcome": "review", "provider_message": "550 5.1.1 No such user here"}
    assert [m.message["X-Receipts-Message-Key"] for m in smtp.messages] == [later]


# --- Resend past its key window --------------------------------------------------


@pytest.fixture
def resend_environ(database_url: str, fake_provider: FakeProviderClient) -> dict[str, str]:
    return worker_environ(database_url, fake_provider)


def past_the_cutoff(db: Db, fake_provider: FakeProviderClient) -> None:
    db.execute("UPDATE email_outbox SET first_attempt_at = now() - interval '23 hours 1 minute'")
    fake_provider.advance_clock(24 * 3600 + 60)  # the key is forgotten


def test_resend_past_the_key_window_finds_the_accepted_email_in_the_sent_list(
    db: Db,
    database_url: str,
    db_proxy: TcpProxy,
    fake_provider: FakeProviderClient,
    resend_environ: dict[str, str],
) -> None:
    [key] = insert_pending(db, 4, prefix="in_1ReLate")[:1]
    db.execute("DELETE FROM email_outbox WHERE message_key <> %s", (key,))
    crash_after_acceptance(
        db, db_proxy, worker_environ(through_proxy(database_url, db_proxy), fake_provider)
    )
    [delivery] = fake_provider.deliveries()
    past_the_cutoff(db, fake_provider)
    drain(resend_environ)
    assert outbox(db) == [
        {"message_key": key, "status": "sent", "review_reason": None, "provider_id": delivery["id"]}
    ]
    assert fake_provider.stats()["requests"] == 1  # no second POST /emails
    assert "found by Resend's sent list" in last_attempt(db)["provider_message"]


def test_resend_past_the_key_window_goes_to_review_when_the_list_has_no_such_email(
    db: Db,
    database_url: str,
    db_proxy: TcpProxy,
    fake_provider: FakeProviderClient,
    resend_environ: dict[str, str],
) -> None:
    """The worker died after its claim, before any request: nothing to find, and
    past the cutoff nobody can be sure, so a person decides (as before)."""
    [key] = insert_pending(db, 1, prefix="in_1ReNone")
    worker = start_worker(worker_environ(through_proxy(database_url, db_proxy), fake_provider))
    db_proxy.on_answer_to(CLAIM_SQL, READY_IDLE, kill(worker))
    assert worker.wait(timeout=30) == -signal.SIGKILL
    age_leases(db)
    past_the_cutoff(db, fake_provider)
    drain(resend_environ)
    [row] = outbox(db)
    assert (row["status"], row["review_reason"]) == ("review", "retry_window_elapsed")
    assert fake_provider.stats()["requests"] == 0
    assert [a["outcome"] for a in attempt_log(db, key)] == [None, "skipped_cutoff"]
    assert "not found by Resend's sent list" in last_attempt(db)["provider_message"]
