"""Idempotent batches in-process: real PostgreSQL, the fake Resend's batch endpoint.

What ``RECEIPTS_BATCH_SIZE`` promises (docs/architecture.md, "Batches"): a
batch's membership, order and body are stored before its first attempt; a
retry sends the same body under the same key, so an accepted batch is
replayed, never sent again; each row gets its own id; an email the provider
refuses goes to review with its message while the others are sent; a row
with a PDF goes singly; the cutoff applies to the whole batch; and batch size
1 is the single send of before. The process-level crash story is
tests/processes/test_batch_processes.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import psycopg

from receipts.config import Settings
from tests.fake_provider import FakeProviderClient
from tests.outbox_states import insert_pending
from tests.outbox_states import row as outbox_row
from tests.worker_runs import work

Row = dict[str, Any]
DB = psycopg.Connection[Row]


def batched(settings: Settings, size: int = 10) -> Settings:
    return replace(settings, batch_size=size)


def batches(db: DB) -> list[Row]:
    return db.execute("SELECT * FROM email_batches ORDER BY created_at, batch_key").fetchall()


def stored_body(db: DB, batch_key: str) -> str:
    found = db.execute(
        """SELECT '[' || string_agg(payload::text, ',' ORDER BY batch_position) || ']' AS body
             FROM email_outbox WHERE batch_key = %s""",
        (batch_key,),
    ).fetchone()
    assert found is not None
    return str(found["body"])


def make_ready(db: DB) -> None:
    """The retry delay has passed (the test decides when, not a clock)."""
    db.execute("UPDATE email_outbox SET available_at = now() WHERE status = 'pending'")


def delivered_once_each(fake: FakeProviderClient, keys: list[str]) -> None:
    tags = [d.get("message_key") or d["key"] for d in fake.deliveries()]
    assert sorted(tags) == sorted(key.replace("/", "_") for key in keys)


def test_rows_go_in_batches_each_with_its_own_id_and_the_stored_order(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """25 rows at batch size 10: three requests (10, 10, 5); every row sent with the id
    of its own delivery; each batch's body is its members' frozen emails in order."""
    keys = insert_pending(db, 25)
    summary = work(batched(worker_settings), concurrency=2)
    assert (summary.sent, summary.review, summary.error) == (25, 0, None)
    stats = fake.stats()
    assert stats["batch_requests"] == 3 and stats["requests"] == 3
    assert sorted(b["size"] for b in batches(db)) == [5, 10, 10]
    assert all(b["finished_at"] is not None and b["attempts"] == 1 for b in batches(db))
    by_tag = {d["message_key"]: d for d in fake.deliveries()}
    for key in keys:
        row = outbox_row(db, key)
        delivery = by_tag[key.replace("/", "_")]
        assert row["status"] == "sent" and row["provider_id"] == delivery["id"]
        assert delivery["key"] == row["batch_key"] and delivery["index"] == row["batch_position"]
    for batch in batches(db):
        sent = [d for d in fake.deliveries() if d["key"] == batch["batch_key"]]
        assert json.loads(stored_body(db, batch["batch_key"])) == [
            json.loads(d["body"]) for d in sorted(sent, key=lambda d: d["index"])
        ]
    delivered_once_each(fake, keys)


def test_a_batch_accepted_but_unanswered_is_replayed_with_the_same_key_and_body(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """The provider delivers the batch and its answer never arrives (the worker's read
    timeout): the rows stay pending in their live batch, are never claimed singly,
    and the next run sends the same body under the same key: a replay, nothing twice."""
    keys = insert_pending(db, 4)
    fake.script({"hold_answer": "late"})
    first = work(batched(worker_settings))
    assert first.sent == 0 and first.retried == 4
    [batch] = batches(db)
    assert batch["finished_at"] is None
    assert {outbox_row(db, key)["status"] for key in keys} == {"pending"}
    fake.release("late")
    make_ready(db)
    second = work(batched(worker_settings))
    assert second.sent == 4
    stats = fake.stats()
    assert stats["requests_by_key"] == {batch["batch_key"]: 2} and stats["replays"] == 1
    delivered_once_each(fake, keys)
    ids = {d["message_key"]: d["id"] for d in fake.deliveries()}
    for key in keys:
        row = outbox_row(db, key)
        assert row["provider_id"] == ids[key.replace("/", "_")] and row["attempts"] == 2
    assert batches(db)[0]["finished_at"] is not None and batches(db)[0]["attempts"] == 2


def test_a_live_batch_is_sent_whole_or_not_at_all_by_a_worker_sending_singly(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """After a 5xx the batch is live: a worker at batch size 1 never sends its rows
    under their own keys (that could be a second email)."""
    keys = insert_pending(db, 3)
    fake.script({"status": 500, "name": "internal_server_error"})
    work(batched(worker_settings))
    make_ready(db)
    assert work(worker_settings).sent == 0
    assert fake.stats()["requests"] == 1
    make_ready(db)
    assert work(batched(worker_settings)).sent == 3
    delivered_once_each(fake, keys)


def test_a_permissive_refusal_sends_that_row_to_review_and_the_others(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """The provider refuses the email at index 1: that row goes to review with the
    provider's message; the other rows are sent with their ids."""
    keys = insert_pending(db, 3)
    fake.script({"refuse": {"1": "The `to` field is invalid."}})
    summary = work(batched(worker_settings))
    assert (summary.sent, summary.review) == (2, 1)
    rows = sorted((outbox_row(db, key) for key in keys), key=lambda r: r["batch_position"])
    assert [r["status"] for r in rows] == ["sent", "review", "sent"]
    refused = rows[1]
    assert refused["review_reason"] == "validation_error" and refused["provider_id"] is None
    [attempt] = db.execute(
        "SELECT * FROM email_attempts WHERE message_key = %s", (refused["message_key"],)
    ).fetchall()
    assert attempt["outcome"] == "review"
    assert attempt["provider_message"] == "The `to` field is invalid."
    assert batches(db)[0]["finished_at"] is not None
    assert len(fake.deliveries()) == 2


def test_a_row_with_a_pdf_is_sent_singly_beside_the_batch(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """Resend's batch endpoint takes no attachment: the row carrying the PDF receipt
    goes by POST /emails under its own key; the others go in one batch."""
    keys = insert_pending(db, 3)
    pdf = {"filename": "receipt-1.pdf", "content": "JVBERi0=", "content_type": "application/pdf"}
    db.execute(
        "UPDATE email_outbox SET payload = NULL, render_input = '{}'::json WHERE message_key = %s",
        (keys[0],),
    )
    db.execute(
        """UPDATE email_outbox SET payload = jsonb_build_object(
               'from', 'billing@example.com', 'to', jsonb_build_array('jenny.rosen@example.com'),
               'subject', 'Receipt', 'text', 'Thanks', 'html', '<p>Thanks</p>',
               'tags', jsonb_build_array(jsonb_build_object('name', 'message_key',
                                                            'value', replace(%s, '/', '_'))),
               'attachments', jsonb_build_array(%s::jsonb)), render_input = NULL
            WHERE message_key = %s""",
        (keys[0], json.dumps(pdf), keys[0]),
    )
    summary = work(batched(worker_settings))
    assert summary.sent == 3
    stats = fake.stats()
    assert stats["batch_requests"] == 1 and stats["requests_by_key"][keys[0]] == 1
    assert outbox_row(db, keys[0])["batch_key"] is None
    [batch] = batches(db)
    assert batch["size"] == 2


def test_a_live_batch_past_the_retry_cutoff_goes_to_review_whole_without_a_call(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    keys = insert_pending(db, 3)
    fake.script({"status": 500, "name": "internal_server_error"})
    work(batched(worker_settings))
    db.execute(
        "UPDATE email_outbox SET first_attempt_at = now() - interval '24 hours', "
        "available_at = now() WHERE message_key = %s",
        (keys[0],),
    )
    make_ready(db)
    summary = work(batched(worker_settings))
    assert summary.review == 3 and fake.stats()["requests"] == 1
    assert {outbox_row(db, key)["review_reason"] for key in keys} == {"retry_window_elapsed"}
    assert batches(db)[0]["finished_at"] is not None


def test_batch_size_one_sends_singly_as_before(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    keys = insert_pending(db, 5)
    assert work(worker_settings).sent == 5
    stats = fake.stats()
    assert stats["batch_requests"] == 0 and stats["requests_by_key"] == dict.fromkeys(keys, 1)
    assert batches(db) == []
