"""``receipts prune`` against a real database: details go, keys stay long enough."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient
from psycopg.types.json import Jsonb

from receipts.cli import main
from tests import stripe_events
from tests.stripe_events import TEST_SECRET, encode, sign

Row = dict[str, Any]
Db = psycopg.Connection[Row]


# A frozen email with the receipt's PDF (RECEIPTS_ATTACH_PDF): pruning a sent row's
# payload drops its attachment with it.
FROZEN_WITH_PDF = {
    "to": ["a@example.com"],
    "attachments": [
        {
            "filename": "receipt-A-1.pdf",
            "content": "JVBERi0xLjMK",
            "content_type": "application/pdf",
        }
    ],
}


def add_receipt(db: Db, key: str, status: str, days_ago: float, *, attempts: int = 1) -> None:
    """An outbox row settled ``days_ago`` days ago, with ``attempts`` logged attempts."""
    lease = uuid.uuid4() if status == "processing" else None
    db.execute(
        """INSERT INTO email_outbox
               (message_key, purpose, account, livemode, invoice_id, source_event_id,
                fingerprint, payload, status, review_reason, attempts, created_at,
                sent_at, lease_token, locked_until, provider_id)
           VALUES (%(key)s, 'invoice-paid', 'platform', false, %(invoice)s, 'evt_x', 'sha256:x',
                   %(payload)s, %(status)s, %(reason)s, %(attempts)s,
                   now() - make_interval(days => %(days)s::int) - interval '1 hour',
                   CASE WHEN %(status)s = 'sent'
                        THEN now() - make_interval(days => %(days)s::int) END,
                   %(lease)s, CASE WHEN %(lease)s::uuid IS NOT NULL THEN now() END,
                   CASE WHEN %(status)s = 'sent' THEN 're_' || %(invoice)s END)""",
        {
            "key": key,
            "invoice": key.split("/")[2],
            "status": status,
            "reason": "invalid_customer_email" if status == "review" else None,
            "attempts": attempts,
            "days": days_ago,
            "lease": lease,
            "payload": Jsonb(FROZEN_WITH_PDF),
        },
    )
    for number in range(1, attempts + 1):
        db.execute(
            """INSERT INTO email_attempts
                   (message_key, attempt, worker_id, lease_token, started_at, outcome)
               VALUES (%s, %s, 'w1', %s, now() - make_interval(days => %s::int), 'sent')""",
            (key, number, uuid.uuid4(), days_ago),
        )


def add_event(db: Db, event_id: str, days_ago: float) -> None:
    db.execute(
        """INSERT INTO stripe_events (event_id, event_type, account, livemode, outcome,
                                      first_received_at, last_received_at)
           VALUES (%s, 'invoice.paid', 'platform', false, 'queued',
                   now() - make_interval(days => %s::int), now())""",
        (event_id, days_ago),
    )


def add_delivery_event(db: Db, svix_id: str, outcome: str, days_ago: float) -> None:
    db.execute(
        """INSERT INTO resend_events (svix_id, event_type, outcome, received_at)
           VALUES (%s, 'email.delivered', %s, now() - make_interval(days => %s::int))""",
        (svix_id, outcome, days_ago),
    )


def key(invoice: str) -> str:
    return f"platform/test/{invoice}/invoice-paid"


def snapshot(db: Db) -> dict[str, list[Row]]:
    return {
        "outbox": db.execute(
            "SELECT message_key, status, payload IS NULL AS cleared FROM email_outbox"
            " ORDER BY message_key"
        ).fetchall(),
        "attempts": db.execute(
            "SELECT message_key, attempt FROM email_attempts ORDER BY 1, 2"
        ).fetchall(),
        "events": db.execute("SELECT event_id FROM stripe_events ORDER BY 1").fetchall(),
        "delivery_events": db.execute("SELECT svix_id FROM resend_events ORDER BY 1").fetchall(),
    }


def prune(database_url: str, *args: str) -> int:
    return main(["prune", *args], {"DATABASE_URL": database_url})


@pytest.fixture
def aged(db: Db) -> Db:
    """Receipts and events of every age and status."""
    add_receipt(db, key("in_Ancient"), "sent", 500)
    add_receipt(db, key("in_Old"), "sent", 40, attempts=2)
    add_receipt(db, key("in_Recent"), "sent", 3)
    add_receipt(db, key("in_OldReview"), "review", 500)
    add_receipt(db, key("in_OldPending"), "pending", 500)
    add_receipt(db, key("in_OldProcessing"), "processing", 500)
    add_event(db, "evt_Old", 45)
    add_event(db, "evt_Recent", 2)
    add_delivery_event(db, "msg_Old", "applied", 45)
    add_delivery_event(db, "msg_OldUnmatched", "unknown_email", 45)
    add_delivery_event(db, "msg_Recent", "applied", 2)
    return db


def test_prune_drops_details_and_old_keys_and_nothing_unfinished(
    aged: Db, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defaults (keys 400 d, details 30 d): a 500-day-old sent row goes whole; a
    40-day-old one loses its attempts and frozen email (its PDF too) but keeps its key; recent
    rows and every pending, processing or review row keep everything."""
    assert prune(database_url) == 0
    assert (
        "1 event(s), 1 delivery event(s), 3 attempt(s), 1 frozen email(s), 1 sent receipt(s)"
        in capsys.readouterr().out
    )
    after = snapshot(aged)
    assert after["outbox"] == [
        {"message_key": key("in_Old"), "status": "sent", "cleared": True},
        {"message_key": key("in_OldPending"), "status": "pending", "cleared": False},
        {"message_key": key("in_OldProcessing"), "status": "processing", "cleared": False},
        {"message_key": key("in_OldReview"), "status": "review", "cleared": False},
        {"message_key": key("in_Recent"), "status": "sent", "cleared": False},
    ]
    assert [row["message_key"] for row in after["attempts"]] == [
        key("in_OldPending"),
        key("in_OldProcessing"),
        key("in_OldReview"),
        key("in_Recent"),
    ]
    assert after["events"] == [{"event_id": "evt_Recent"}]
    # A delivery event that matched no receipt is evidence of a send: kept.
    assert after["delivery_events"] == [{"svix_id": "msg_OldUnmatched"}, {"svix_id": "msg_Recent"}]


def test_second_prune_finds_nothing_left(aged: Db, database_url: str) -> None:
    """Prune is idempotent: a second run drops nothing and changes nothing."""
    assert prune(database_url) == 0
    before = snapshot(aged)
    assert prune(database_url) == 0
    assert snapshot(aged) == before


def test_dry_run_counts_and_changes_nothing(
    aged: Db, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--dry-run reports exactly what a real run then drops, and changes nothing."""
    before = snapshot(aged)
    assert prune(database_url, "--dry-run") == 0
    dry = capsys.readouterr().out
    assert snapshot(aged) == before
    assert prune(database_url) == 0
    real = capsys.readouterr().out
    assert dry.split("would drop: ")[1] == real.split("dropped: ")[1]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--keep-keys-days", "30"], "--keep-keys-days must be at least 35"),
        (["--keep-keys-days", "0"], "--keep-keys-days must be at least 35"),
        (["--keep-details-days", "0"], "--keep-details-days must be at least 1"),
        (["--keep-keys-days", "40", "--keep-details-days", "60"], "cannot exceed"),
        (["--batch-size", "0"], "--batch-size must be at least 1"),
    ],
)
def test_unsafe_settings_are_refused_and_change_nothing(
    aged: Db,
    database_url: str,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    named: str,
) -> None:
    """A retention that could let a redelivery send twice is refused by name."""
    before = snapshot(aged)
    assert prune(database_url, *args) == 2
    assert named in capsys.readouterr().err
    assert snapshot(aged) == before


def test_shortest_allowed_key_retention_keeps_keys_inside_it(aged: Db, database_url: str) -> None:
    """--keep-keys-days 35 drops the 40-day-old receipt, not the 3-day-old one."""
    assert prune(database_url, "--keep-keys-days", "35") == 0
    keys = [row["message_key"] for row in snapshot(aged)["outbox"] if row["status"] == "sent"]
    assert keys == [key("in_Recent")]


def test_an_import_with_an_old_send_time_keeps_its_key_for_the_full_period(
    db: Db, database_url: str
) -> None:
    """A receipt recorded today as sent 500 days ago by an earlier system is
    settled today: its key stays (only its frozen details may go)."""
    add_receipt(db, key("in_Imported"), "sent", 500)
    db.execute("UPDATE email_outbox SET created_at = now()")
    assert prune(database_url, "--keep-keys-days", "35") == 0
    assert [row["message_key"] for row in snapshot(db)["outbox"]] == [key("in_Imported")]


def test_small_batches_prune_everything(db: Db, database_url: str) -> None:
    """Batches smaller than the work loop until done (keyset walk, repeated deletes)."""
    for n in range(7):
        add_receipt(db, key(f"in_Old{n}"), "sent", 40 + n)
        add_receipt(db, key(f"in_Ancient{n}"), "sent", 450 + n)
        add_event(db, f"evt_Old{n}", 50)
    assert prune(database_url, "--batch-size", "2") == 0
    after = snapshot(db)
    assert len(after["outbox"]) == 7 and all(row["cleared"] for row in after["outbox"])
    assert after["attempts"] == [] and after["events"] == []


def test_redelivery_after_details_pruned_is_still_a_duplicate(
    client: FlaskClient, db: Db, database_url: str
) -> None:
    """The point of keeping keys: Stripe resends a 40-day-old event after its
    event row, attempts and email were pruned; no second receipt is queued."""
    event = stripe_events.event(stripe_events.invoice(id="in_1Resent"))
    body = encode(event)
    headers = {"Stripe-Signature": sign(body, TEST_SECRET)}
    first = client.post("/webhooks/stripe", data=body, headers=headers)
    assert first.json is not None and first.json["outcome"] == "queued"
    db.execute(
        """UPDATE email_outbox SET status = 'sent', provider_id = 're_1',
                                   created_at = now() - interval '40 days 1 minute',
                                   sent_at = now() - interval '40 days'"""
    )
    db.execute("UPDATE stripe_events SET first_received_at = now() - interval '40 days'")
    assert prune(database_url) == 0
    assert db.execute("SELECT count(*) AS n FROM stripe_events").fetchone() == {"n": 0}

    headers = {"Stripe-Signature": sign(body, TEST_SECRET)}
    response = client.post("/webhooks/stripe", data=body, headers=headers)
    assert response.json is not None and response.json["outcome"] == "duplicate"
    [row] = db.execute("SELECT status, payload FROM email_outbox").fetchall()
    assert row == {"status": "sent", "payload": None}


def add_batch(db: Db, batch_key: str, members: list[str], *, days_ago: float, live: bool) -> None:
    """A provider batch (RECEIPTS_BATCH_SIZE) of existing rows, finished unless ``live``."""
    db.execute(
        """INSERT INTO email_batches (batch_key, provider, size, body_sha256, created_at,
                                      first_attempt_at, finished_at)
           VALUES (%(key)s, 'resend', %(size)s, 'x',
                   now() - make_interval(days => %(days)s::int),
                   now() - make_interval(days => %(days)s::int),
                   CASE WHEN NOT %(live)s THEN now() - make_interval(days => %(days)s::int) END)""",
        {"key": batch_key, "size": len(members), "days": days_ago, "live": live},
    )
    for position, message_key in enumerate(members):
        db.execute(
            "UPDATE email_outbox SET batch_key = %s, batch_position = %s WHERE message_key = %s",
            (batch_key, position, message_key),
        )


def test_a_finished_batch_goes_once_its_receipts_have(
    db: Db, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A finished batch whose receipts prune drops goes with them; one that still
    names a kept receipt stays, and so does a live one, however old."""
    add_receipt(db, key("in_AncientA"), "sent", 500)
    add_receipt(db, key("in_AncientB"), "sent", 500)
    add_receipt(db, key("in_RecentA"), "sent", 3)
    add_receipt(db, key("in_AncientMixed"), "sent", 500)
    add_receipt(db, key("in_LivePending"), "pending", 500)
    add_batch(
        db, "batch/ancient", [key("in_AncientA"), key("in_AncientB")], days_ago=500, live=False
    )
    add_batch(
        db, "batch/mixed", [key("in_AncientMixed"), key("in_RecentA")], days_ago=500, live=False
    )
    add_batch(db, "batch/live", [key("in_LivePending")], days_ago=500, live=True)

    assert prune(database_url, "--dry-run") == 0
    assert "1 provider batch(es)" in capsys.readouterr().out
    assert prune(database_url) == 0
    assert "1 provider batch(es)" in capsys.readouterr().out
    left = db.execute("SELECT batch_key FROM email_batches ORDER BY 1").fetchall()
    assert left == [{"batch_key": "batch/live"}, {"batch_key": "batch/mixed"}]
