"""Each provider's guarantee, on real ``receipts worker`` processes.

Postmark (the fake Postmark API, whose search index lags behind), SMTP (a
real aiosmtpd server) and Resend past its key window (the fake Resend's sent
list). The same crash for each: the provider accepted the message and the
worker is SIGKILLed as it writes that down (its UPDATE on the way to
PostgreSQL, seen by the TCP proxy), so the attempt stays unfinished. After
the lease: Postmark's search finds the message and the receipt is sent with
its MessageID, nothing sent again; Resend past 24 h finds it in the sent
list; SMTP cannot be asked, so the receipt goes to review, never twice.
docs/architecture.md, "Providers and their guarantees".
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.fake_postmark import FakePostmarkClient, running_fake_postmark
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
from tests.helpers import wait_for
from tests.outbox_states import insert_pending
from tests.real_processes import finish, start_worker, worker_environ
from tests.smtp_server import SmtpServer, running_smtp_server
from tests.tcp_proxy import TcpProxy, through_proxy

Row = dict[str, Any]
Db = psycopg.Connection[Row]
TOKEN = "postmark-fault-lab-token"
LAG = 0.3  # the worker's RECEIPTS_POSTMARK_SEARCH_LAG_SECONDS; the fake's index lags less


def environ(database_url: str, **extra: str) -> dict[str, str]:
    """A worker's environment for a provider other than Resend (short timeouts)."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "DATABASE_URL": database_url,
        "RECEIPTS_PROVIDER_TIMEOUT": "2",
        "RECEIPTS_PROVIDER_CONNECT_TIMEOUT": "1",
        "RECEIPTS_RETRY_BASE_SECONDS": "0.2",
        "RECEIPTS_RETRY_MAX_SECONDS": "1",
        "RECEIPTS_DATABASE_TIMEOUT": "2",
        "RECEIPTS_SEND_RATE": "0",
        "LOG_FORMAT": "json",
        **extra,
    }


def postmark_environ(database_url: str, postmark: FakePostmarkClient) -> dict[str, str]:
    return environ(
        database_url,
        RECEIPTS_PROVIDER="postmark",
        POSTMARK_SERVER_TOKEN=TOKEN,
        POSTMARK_API_URL=postmark.url,
        RECEIPTS_POSTMARK_SEARCH_LAG_SECONDS=str(LAG),
    )


def smtp_environ(database_url: str, smtp: SmtpServer) -> dict[str, str]:
    return environ(database_url, RECEIPTS_PROVIDER="smtp", SMTP_URL=smtp.url())


@pytest.fixture
def postmark() -> Iterator[FakePostmarkClient]:
    with running_fake_postmark(token=TOKEN, search_lag=LAG / 2) as fake:
        yield fake


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    with running_smtp_server() as server:
        yield server


def drain(environment: dict[str, str]) -> str:
    code, out, err = finish(start_worker(environment))
    assert code == 0, err
    return out


def crash_after_acceptance(db: Db, db_proxy: TcpProxy, environment: dict[str, str]) -> None:
    """One drain run, SIGKILLed as it writes the provider's answer; then its lease ends."""
    worker = start_worker(environment)
    db_proxy.on_client_bytes(RECORD_SQL, kill(worker))
    assert worker.wait(timeout=30) == -signal.SIGKILL
    assert statuses(db) == {"processing": 1}
    age_leases(db)


def outbox(db: Db) -> list[Row]:
    return db.execute(
        "SELECT message_key, status, review_reason, provider_id FROM email_outbox"
        " ORDER BY message_key"
    ).fetchall()


def last_attempt(db: Db) -> Row:
    row = db.execute(
        "SELECT outcome, provider_message, provider_id FROM email_attempts ORDER BY id DESC LIMIT 1"
    ).fetchone()
    assert row is not None
    return row


def attempt_started_before(db: Db, seconds: float) -> bool:
    """The latest attempt started at least ``seconds`` ago (by the database's clock)."""
    row = db.execute(
        "SELECT max(started_at) < now() - make_interval(secs => %s) AS old FROM email_attempts",
        (seconds,),
    ).fetchone()
    return bool(row and row["old"])


# --- Postmark --------------------------------------------------------------------


def test_postmark_sends_each_receipt_once_with_its_key_as_metadata(
    db: Db, database_url: str, postmark: FakePostmarkClient
) -> None:
    keys = insert_pending(db, 12, prefix="in_1PmOnce")
    drain(postmark_environ(database_url, postmark))
    stats = postmark.stats()
    assert stats["deliveries_by_key"] == dict.fromkeys(keys, 1)
    assert stats["searches"] == 0  # nothing was ambiguous: nothing to ask
    ids = {delivery["key"]: delivery["id"] for delivery in postmark.deliveries()}
    assert [(r["status"], r["provider_id"]) for r in outbox(db)] == [
        ("sent", ids[key]) for key in keys
    ]


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


def test_postmark_timeout_after_acceptance_is_found_by_search_after_the_lag(
    db: Db, database_url: str, postmark: FakePostmarkClient
) -> None:
    """Postmark accepts but answers later than the read timeout: the retry waits
    at least the search lag, asks, finds the message: one delivery."""
    [key] = insert_pending(db, 1, prefix="in_1PmSlow")
    postmark.script({"hold": 1.5})
    slow = {**postmark_environ(database_url, postmark), "RECEIPTS_PROVIDER_TIMEOUT": "0.5"}
    code, _, err = finish(start_worker(slow))
    assert code == 5, err  # every send of the run failed: the provider is failing
    retry = db.execute(
        "SELECT status, available_at - updated_at AS wait FROM email_outbox"
    ).fetchone()
    assert retry is not None and retry["status"] == "pending"
    assert retry["wait"].total_seconds() >= LAG
    wait_until_searchable(db)
    db.execute("UPDATE email_outbox SET available_at = now()")
    drain(postmark_environ(database_url, postmark))
    [delivery] = postmark.deliveries()
    assert outbox(db)[0]["provider_id"] == delivery["id"]
    assert [a["outcome"] for a in attempt_log(db, key)] == ["retry", "sent"]


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
    code, _, err = finish(start_worker(postmark_environ(database_url, postmark)))
    assert code == 2, err
    assert "POSTMARK_SERVER_TOKEN" in err
    held = db.execute("SELECT status, attempts FROM email_outbox").fetchone()
    assert held == {"status": "pending", "attempts": 1}  # the refused ask is refunded
    assert postmark.stats()["deliveries"] == 1
    drain(postmark_environ(database_url, postmark))
    [delivery] = postmark.deliveries()
    assert outbox(db)[0]["provider_id"] == delivery["id"]
    assert [a["outcome"] for a in attempt_log(db, key)] == [None, "config_error", "sent"]


def wait_until_searchable(db: Db) -> None:
    wait_for(lambda: attempt_started_before(db, LAG), what="the search lag to pass")


# --- SMTP ------------------------------------------------------------------------


def test_smtp_sends_each_receipt_once_with_a_message_id_from_its_key(
    db: Db, database_url: str, smtp: SmtpServer
) -> None:
    keys = insert_pending(db, 12, prefix="in_1SmtpOnce")
    drain(smtp_environ(database_url, smtp))
    received = {message.message["X-Receipts-Message-Key"]: message for message in smtp.messages}
    assert sorted(received) == keys
    for row in outbox(db):
        assert row["status"] == "sent"
        assert row["provider_id"] == received[row["message_key"]].message_id
        assert row["provider_id"].endswith("@example.com>")


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


def test_smtp_connection_lost_after_data_goes_to_review_unretried(
    db: Db, database_url: str, smtp: SmtpServer
) -> None:
    """The server takes the message and the connection drops before its reply:
    RFC 5321's ambiguous send. Review, one message at the server."""
    insert_pending(db, 1, prefix="in_1SmtpDrop")
    smtp.drop_after_data()
    drain(smtp_environ(database_url, smtp))
    db.execute("UPDATE email_outbox SET available_at = now()")
    drain(smtp_environ(database_url, smtp))
    [row] = outbox(db)
    assert (row["status"], row["review_reason"]) == ("review", "ambiguous_smtp_send")
    assert len(smtp.messages) == 1


def test_smtp_reply_later_than_the_timeout_goes_to_review_unretried(
    db: Db, database_url: str, smtp: SmtpServer
) -> None:
    """The server takes the message and answers its final ``.`` only after the
    worker's read timeout (held until the test releases it): ambiguous, review,
    one message at the server; a second run sends nothing."""
    [key] = insert_pending(db, 1, prefix="in_1SmtpSlow")
    release = smtp.hold_reply_after_data()
    drain({**smtp_environ(database_url, smtp), "RECEIPTS_PROVIDER_TIMEOUT": "0.5"})
    release.set()
    db.execute("UPDATE email_outbox SET available_at = now()")
    drain(smtp_environ(database_url, smtp))
    [row] = outbox(db)
    assert (row["status"], row["review_reason"]) == ("review", "ambiguous_smtp_send")
    assert len(smtp.messages) == 1
    assert [a["outcome"] for a in attempt_log(db, key)] == ["review"]
    assert "timed out after the whole message was sent" in last_attempt(db)["provider_message"]


def test_smtp_5xx_to_the_message_goes_to_review_with_the_servers_reply(
    db: Db, database_url: str, smtp: SmtpServer
) -> None:
    [key] = insert_pending(db, 1, prefix="in_1SmtpSpam")
    smtp.reply_to_data("554 5.7.1 Message rejected as spam")
    drain(smtp_environ(database_url, smtp))
    [row] = outbox(db)
    assert (row["status"], row["review_reason"]) == ("review", "smtp_554")
    assert [a["outcome"] for a in attempt_log(db, key)] == ["review"]
    assert last_attempt(db)["provider_message"] == "554 5.7.1 Message rejected as spam"
    assert smtp.messages == []


@pytest.mark.slow
def test_smtp_4xx_is_retried_and_5xx_goes_to_review_with_the_servers_reply(
    db: Db, database_url: str, smtp: SmtpServer
) -> None:
    environment = smtp_environ(database_url, smtp)
    [later] = insert_pending(db, 1, prefix="in_1SmtpLater")
    smtp.reply_to_data("451 4.3.0 Try again later")
    code, _, err = finish(start_worker(environment))
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
