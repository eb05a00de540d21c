"""receipts/queries/delivery.sql: the worker's statements, each named and saying what it ensures."""

from __future__ import annotations

from receipts import queries
from receipts.vocabulary import NOTIFY_CHANNEL

DELIVERY = queries.load("delivery")


def test_the_worker_runs_exactly_these_statements() -> None:
    """The names the delivery code asks for (claims, listener, the sending pause,
    batches, the fleet's pace) are the file's names."""
    assert set(DELIVERY) == {
        "claim_ready",
        "freeze_rendered_payloads",
        "review_unrenderable",
        "record_attempts",
        "listen",
        "record_sending_pause",
        "current_sending_pause",
        "clear_sending_pause",
        "form_batches",
        "claim_batches",
        "batch_bodies",
        "reserve_send_slot",
        "send_pace_wait",
        "hold_send_pace",
        "record_team_limit",
    }


def test_each_statement_has_its_name_line_then_one_guarantee_line() -> None:
    """A reader (and the server log) sees the name, then what the statement guarantees."""
    for name, text in DELIVERY.items():
        first, second, third, *_ = text.splitlines()
        assert first == f"-- name: {name}"
        assert second.startswith("-- ") and len(second) > 40, name
        assert not third.startswith("-- "), name


def test_the_listener_listens_where_ingest_and_review_notify() -> None:
    """The channel in the LISTEN is the one vocabulary.NOTIFY_CHANNEL names."""
    assert DELIVERY["listen"].splitlines()[-1] == f"LISTEN {NOTIFY_CHANNEL}"
