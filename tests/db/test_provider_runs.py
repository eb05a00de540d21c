"""Postmark and SMTP from a whole worker run down to the outbox, in this process.

Runs of ``receipts worker`` (its command line, run here: tests/worker_runs.py)
against the fake Postmark API, whose search index lags behind, and a real SMTP
server that can hold, drop or refuse its reply. What each answer does to the
row: docs/architecture.md, "Providers and their guarantees". The same
guarantees with the worker SIGKILLed after the provider accepted are in
tests/processes/faults/test_provider_guarantees.py.
"""

from __future__ import annotations

from typing import Any

import psycopg

from tests.fake_postmark import FakePostmarkClient
from tests.fault_lab import attempt_log
from tests.outbox_states import insert_pending
from tests.provider_runs import (
    SEARCH_LAG,
    drain,
    last_attempt,
    outbox,
    postmark_environ,
    smtp_environ,
    wait_until_searchable,
)
from tests.smtp_server import SmtpServer
from tests.worker_runs import worker_command

Row = dict[str, Any]
Db = psycopg.Connection[Row]


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


def test_postmark_timeout_after_acceptance_is_found_by_search_after_the_lag(
    db: Db, database_url: str, postmark: FakePostmarkClient
) -> None:
    """Postmark accepts but answers later than the read timeout: the retry waits
    at least the search lag, asks, finds the message: one delivery."""
    [key] = insert_pending(db, 1, prefix="in_1PmSlow")
    postmark.script({"hold": 1.5})
    slow = {**postmark_environ(database_url, postmark), "RECEIPTS_PROVIDER_TIMEOUT": "0.5"}
    code, _, err = worker_command(slow)
    assert code == 5, err  # every send of the run failed: the provider is failing
    retry = db.execute(
        "SELECT status, available_at - updated_at AS wait FROM email_outbox"
    ).fetchone()
    assert retry is not None and retry["status"] == "pending"
    assert retry["wait"].total_seconds() >= SEARCH_LAG
    wait_until_searchable(db)
    db.execute("UPDATE email_outbox SET available_at = now()")
    drain(postmark_environ(database_url, postmark))
    [delivery] = postmark.deliveries()
    assert outbox(db)[0]["provider_id"] == delivery["id"]
    assert [a["outcome"] for a in attempt_log(db, key)] == ["retry", "sent"]


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
