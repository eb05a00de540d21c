"""What ``claim_ready`` hands the sender about earlier attempts (delivery.sql: claim_ready).

Each leased row comes with its latest attempt that may have reached the
provider (and its age), and any delivery-webhook evidence; a row past the
cutoff is leased for a lookup only when the provider can be asked and an
attempt may hide an accepted send.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from receipts.delivery.claims import Claim, claim_ready
from tests.outbox_states import insert_pending

Db = psycopg.Connection[dict[str, Any]]


def claim(database_url: str, *, look_up: bool) -> Claim:
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        return claim_ready(
            conn, limit=5, worker_id="w-lookups", lease_seconds=60, max_attempts=10,
            retry_cutoff_hours=23, render=lambda key, given: given, look_up_past_limit=look_up,
        )  # fmt: skip


def earlier_attempt(db: Db, key: str, outcome: str | None, http_status: int | None = None) -> None:
    db.execute(
        """INSERT INTO email_attempts (message_key, attempt, worker_id, lease_token, started_at,
                                       finished_at, outcome, http_status, provider_error)
           VALUES (%s, 1, 'w-dead', gen_random_uuid(), now() - interval '5 minutes',
                   CASE WHEN %s::text IS NULL THEN NULL ELSE now() END, %s, %s, %s)""",
        (key, outcome, outcome, http_status, "timeout" if http_status is None else None),
    )
    db.execute(
        "UPDATE email_outbox SET attempts = 1, first_attempt_at = now() - interval '5 minutes'"
        " WHERE message_key = %s",
        (key,),
    )


def test_a_leased_row_comes_with_its_latest_attempt_that_may_have_reached_the_provider(
    db: Db, database_url: str
) -> None:
    [key] = insert_pending(db, 1, prefix="in_1Prior")
    earlier_attempt(db, key, None)
    [row] = claim(database_url, look_up=True).rows
    assert row.prior is not None and row.prior.outcome is None
    assert 290 <= row.prior.age_seconds <= 400
    assert row.past_limit is None and row.evidence_id is None and row.first_attempt_at


def test_a_row_never_tried_has_no_prior_attempt(db: Db, database_url: str) -> None:
    insert_pending(db, 1, prefix="in_1Fresh")
    [row] = claim(database_url, look_up=True).rows
    assert row.prior is None


@pytest.mark.parametrize(
    ("outcome", "http_status", "look_up", "leased_for_lookup"),
    [
        (None, None, True, True),  # the worker died: ask
        ("retry", None, True, True),  # a timeout
        ("retry", 503, True, True),
        ("retry", 409, True, False),  # refused for now: nothing can have been accepted
        (None, None, False, False),  # the provider cannot be asked (SMTP)
    ],
)
def test_past_the_cutoff_a_row_is_leased_for_a_lookup_only_when_it_can_help(
    db: Db,
    database_url: str,
    outcome: str | None,
    http_status: int | None,
    look_up: bool,
    leased_for_lookup: bool,
) -> None:
    [key] = insert_pending(db, 1, prefix="in_1PastCutoff")
    earlier_attempt(db, key, outcome, http_status)
    db.execute("UPDATE email_outbox SET first_attempt_at = now() - interval '23 hours 1 minute'")
    found = claim(database_url, look_up=look_up)
    if leased_for_lookup:
        [row] = found.rows
        assert row.past_limit == "retry_window_elapsed" and found.skipped == []
    else:
        assert found.rows == [] and [s.review_reason for s in found.skipped] == [
            "retry_window_elapsed"
        ]


def test_a_delivery_webhook_about_the_key_comes_with_the_row(db: Db, database_url: str) -> None:
    [key] = insert_pending(db, 1, prefix="in_1Evidence")
    earlier_attempt(db, key, None)
    db.execute(
        """INSERT INTO resend_events (svix_id, event_type, email_id, message_key, outcome)
           VALUES ('msg_1', 'email.delivered', 're_seen', %s, 'evidence')""",
        (key,),
    )
    [row] = claim(database_url, look_up=True).rows
    assert row.evidence_id == "re_seen"
