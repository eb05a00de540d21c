"""``receipts status``: the summary an operator (or a health check) reads first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from receipts.cli import main
from tests.outbox_states import (
    Db,
    insert_attempt,
    insert_conflict_event,
    insert_row,
)


def status_json(environ: dict[str, str], capsys: Any, *extra: str) -> tuple[int, dict[str, Any]]:
    code = main(["status", "--json", *extra], environ)
    return code, json.loads(capsys.readouterr().out)


def test_empty_outbox_is_healthy(environ: dict[str, str], capsys: Any) -> None:
    """No rows: exit 0, every status counted as zero, nothing needs a person."""
    code, document = status_json(environ, capsys)
    assert code == 0
    assert document["counts"] == {"pending": 0, "processing": 0, "sent": 0, "review": 0}
    assert document["needs_person"] == []
    assert document["oldest_pending_age_seconds"] is None


def test_counts_and_recent_sends(environ: dict[str, str], db: Db, capsys: Any) -> None:
    """Rows are counted by status; sends are counted for the last hour and day."""
    insert_row(db, "in_1P1")
    insert_row(db, "in_1P2", status="processing", attempts=1, first_attempt_ago=timedelta(0))
    insert_row(db, "in_1S1", status="sent", provider_id="re_1", sent_ago=timedelta(minutes=5))
    insert_row(db, "in_1S2", status="sent", provider_id="re_2", sent_ago=timedelta(hours=5))
    insert_row(db, "in_1S3", status="sent", provider_id="re_3", sent_ago=timedelta(days=3))
    code, document = status_json(environ, capsys)
    assert code == 0
    assert document["counts"] == {"pending": 1, "processing": 1, "sent": 3, "review": 0}
    assert (document["sent_last_hour"], document["sent_last_day"]) == (1, 2)


def test_a_review_row_needs_a_person(environ: dict[str, str], db: Db, capsys: Any) -> None:
    """Any open review row makes the health check fail (exit 1) and is listed by reason."""
    insert_row(db, "in_1R1", status="review", review_reason="attempts_exhausted")
    insert_row(db, "in_1R2", status="review", review_reason="attempts_exhausted")
    insert_row(db, "in_1R3", status="review", review_reason="missing_customer_email")
    code, document = status_json(environ, capsys)
    assert code == 1
    assert document["review_by_reason"] == {"attempts_exhausted": 2, "missing_customer_email": 1}
    assert document["open_review"] == 3
    assert "3 receipt(s) in review" in document["needs_person"][0]


def test_dismissed_rows_do_not_need_a_person(environ: dict[str, str], db: Db, capsys: Any) -> None:
    """A dismissed receipt was decided: counted apart, exit 0."""
    insert_row(db, "in_1D1", status="review", review_reason="dismissed")
    code, document = status_json(environ, capsys)
    assert code == 0
    assert document["dismissed"] == 1 and document["open_review"] == 0


def test_a_receipt_settled_by_a_resend_does_not_need_a_person(
    environ: dict[str, str], db: Db, capsys: Any
) -> None:
    """A review row whose resend carries its email is counted as resent, not open: exit 0,
    as long as nothing else waits."""
    key = insert_row(db, "in_1R1", status="review", review_reason="validation_error")
    copy = insert_row(db, "in_1R1", key=key + "/resend-1", status="sent", provider_id="re_1",
                      sent_ago=timedelta(minutes=1))  # fmt: skip
    db.execute("UPDATE email_outbox SET resent_as = %s WHERE message_key = %s", (copy, key))
    code, document = status_json(environ, capsys)
    assert code == 0, document["needs_person"]
    assert (document["resent"], document["open_review"], document["dismissed"]) == (1, 0, 0)
    assert document["review_by_reason"] == {}
    assert main(["status"], environ) == 0
    assert "review          0 open (0 dismissed, 1 resent)" in capsys.readouterr().out


def test_old_ready_pending_row_fails_the_check(
    environ: dict[str, str], db: Db, capsys: Any
) -> None:
    """A ready row waiting past --max-pending-age means no worker is draining: exit 1."""
    insert_row(db, "in_1Old", available_ago=timedelta(minutes=20))
    code, document = status_json(environ, capsys)
    assert code == 1
    assert 1199 < document["oldest_pending_age_seconds"] < 1300
    assert "is a worker running?" in document["needs_person"][0]
    code, _ = status_json(environ, capsys, "--max-pending-age", "30m")
    assert code == 0
    code, _ = status_json({**environ, "RECEIPTS_MAX_PENDING_AGE": "1800"}, capsys)
    assert code == 0


def test_rows_waiting_for_a_later_retry_are_not_late(
    environ: dict[str, str], db: Db, capsys: Any
) -> None:
    """A pending row scheduled in the future (backoff) does not count as waiting."""
    insert_row(db, "in_1Later", available_ago=timedelta(minutes=-30))
    code, document = status_json(environ, capsys)
    assert code == 0 and document["oldest_pending_age_seconds"] is None


def test_time_left_before_the_retry_cutoff(environ: dict[str, str], db: Db, capsys: Any) -> None:
    """The row retried longest is named with its time left before the 23 h cutoff."""
    insert_row(db, "in_1Young", attempts=2, first_attempt_ago=timedelta(hours=1))
    key = insert_row(db, "in_1Aged", attempts=7, first_attempt_ago=timedelta(hours=20))
    code, document = status_json(environ, capsys)
    assert code == 0
    assert document["closest_to_cutoff_key"] == key
    assert 3 * 3600 - 60 < document["retry_cutoff_remaining_seconds"] <= 3 * 3600


def test_lease_recoveries_conflicts_and_abandoned_attempts(
    environ: dict[str, str], db: Db, capsys: Any
) -> None:
    """A died-mid-attempt followed by a new claim is one recovery; a dead attempt
    nobody reclaimed yet is abandoned; conflicts of the last day are counted."""
    recovered = insert_row(db, "in_1Rec", status="sent", provider_id="re_9", attempts=2)
    insert_attempt(db, recovered, attempt=1, started_ago=timedelta(minutes=10), finished=False)
    insert_attempt(db, recovered, attempt=2, started_ago=timedelta(minutes=7), provider_id="re_9")
    lease = uuid.uuid4()
    dead = insert_row(
        db,
        "in_1Dead",
        status="processing",
        attempts=1,
        first_attempt_ago=timedelta(minutes=5),
        lease_token=lease,
        locked_for=timedelta(minutes=-1),
    )
    insert_attempt(
        db, dead, attempt=1, started_ago=timedelta(minutes=5), finished=False, lease_token=lease
    )
    live_lease = uuid.uuid4()
    flying = insert_row(
        db,
        "in_1Fly",
        status="processing",
        attempts=1,
        first_attempt_ago=timedelta(0),
        lease_token=live_lease,
        locked_for=timedelta(minutes=2),
    )
    insert_attempt(
        db, flying, started_ago=timedelta(seconds=1), finished=False, lease_token=live_lease
    )
    insert_conflict_event(db, recovered)
    code, document = status_json(environ, capsys)
    assert code == 0
    assert document["lease_recoveries_24h"] == 1
    assert document["abandoned_attempts"] == 1
    assert document["conflicts_24h"] == 1


def test_text_output_names_what_needs_a_person(
    environ: dict[str, str], db: Db, capsys: Any
) -> None:
    """Without --json the same facts print as lines, ending with the verdict."""
    insert_row(db, "in_1T", status="review", review_reason="validation_error")
    assert main(["status"], environ) == 1
    out = capsys.readouterr().out
    assert "review          1 open: validation_error 1" in out
    assert out.rstrip().endswith(
        "NEEDS A PERSON: 1 receipt(s) in review: see `receipts review list`"
    )


def test_bad_duration_is_a_usage_error(environ: dict[str, str], capsys: Any) -> None:
    """--max-pending-age must be a duration; argparse exits 2 naming it."""
    with pytest.raises(SystemExit) as exit_info:
        main(["status", "--max-pending-age", "soon"], environ)
    assert exit_info.value.code == 2
    assert "not a duration" in capsys.readouterr().err


def test_bounced_and_spam_marked_receipts_are_listed(
    environ: dict[str, str], db: Db, capsys: Any
) -> None:
    """A sent receipt that bounced means the customer got none: status names it
    (information, not a failed health check)."""
    bounced = insert_row(db, "in_1Bounce", status="sent", provider_id="re_b")
    insert_row(db, "in_1Fine", status="sent", provider_id="re_f")
    db.execute(
        """UPDATE email_outbox SET delivery_status = 'bounced', delivery_status_at = now()
           WHERE message_key = %s""",
        (bounced,),
    )
    db.execute(
        """INSERT INTO resend_events (svix_id, event_type, email_id, message_key, outcome)
           VALUES ('msg_b', 'email.bounced', 're_b', %s, 'applied'),
                  ('msg_f', 'email.delivered', 're_f', NULL, 'applied')""",
        (bounced,),
    )
    code, document = status_json(environ, capsys)
    assert code == 0
    assert [p["message_key"] for p in document["delivery_problems_24h"]] == [bounced]
    assert main(["status"], environ) == 0
    assert f"bounced    {bounced}" in capsys.readouterr().out


def test_the_installed_command_is_a_health_check(environ: dict[str, str], db: Db) -> None:
    """Run as a platform would: the `receipts status` process exits 0, then 1 once a
    receipt waits for a person."""
    script = Path(sys.executable).with_name("receipts")
    env = {**os.environ, **environ}
    assert subprocess.run([script, "status"], env=env, capture_output=True).returncode == 0
    insert_row(db, "in_1Proc", status="review", review_reason="validation_error")
    finished = subprocess.run([script, "status"], env=env, capture_output=True, text=True)
    assert finished.returncode == 1
    assert "NEEDS A PERSON" in finished.stdout


# --- what stops receipts from reaching customers ----------------------------------


def _not_delivered(db: Db, invoice_id: str, status: str, detail: str | None) -> str:
    key = insert_row(db, invoice_id, status="sent", provider_id=f"re_{invoice_id}")
    db.execute(
        """UPDATE email_outbox SET delivery_status = %s, delivery_detail = %s,
                                   delivery_status_at = now() WHERE message_key = %s""",
        (status, detail, key),
    )
    db.execute(
        """INSERT INTO resend_events (svix_id, event_type, email_id, message_key, outcome, detail)
           VALUES (%s, %s, %s, %s, 'applied', %s)""",
        (f"msg_{invoice_id}", f"email.{status}", f"re_{invoice_id}", key, detail),
    )
    return key


@pytest.mark.parametrize(
    ("status", "detail"), [("failed", "reached_daily_quota"), ("suppressed", "previous_bounce")]
)
def test_a_failed_or_suppressed_receipt_needs_a_person(
    environ: dict[str, str], db: Db, capsys: Any, status: str, detail: str
) -> None:
    """Resend never tried to deliver it: counted as not delivered, with Resend's reason,
    and status exits 1 (a bounce stays information, see above)."""
    key = _not_delivered(db, "in_1NotDel", status, detail)
    code, document = status_json(environ, capsys)
    assert code == 1
    assert [p["message_key"] for p in document["delivery_problems_24h"]] == [key]
    assert document["delivery_problems_24h"][0]["delivery_detail"] == detail
    assert any("not delivered in the last 24 h" in p for p in document["needs_person"])
    assert main(["status"], environ) == 1
    out = capsys.readouterr().out
    assert f"{status:<10} {key}  ({detail})" in out
    assert f"not delivered   1 in the last 24 h: {status} 1" in out


def test_a_sending_pause_needs_a_person_and_says_until_when(
    environ: dict[str, str], db: Db, capsys: Any
) -> None:
    """A quota pause recorded by a worker: "sending paused: daily quota until …", exit 1."""
    db.execute(
        """INSERT INTO sending_pauses (provider, reason, paused_at, paused_until, worker_id)
           VALUES ('resend', 'daily_quota_exceeded', '2026-11-30T18:00:00Z',
                   now() + interval '3 hours', 'host:1:abc')"""
    )
    code, document = status_json(environ, capsys)
    assert code == 1
    [pause] = document["sending_pauses"]
    assert pause["reason"] == "daily_quota_exceeded" and 10700 < pause["seconds_left"] <= 10800
    assert document["needs_person"][0].startswith("sending paused: daily quota until ")
    assert main(["status"], environ) == 1
    out = capsys.readouterr().out
    assert "NEEDS A PERSON: sending paused: daily quota until " in out
    assert "receipts worker --resume" in out
    insert_row(db, "in_1Waiting", available_ago=timedelta(hours=1))
    code, document = status_json(environ, capsys)
    assert document["needs_person"][-1].endswith("(limit 15m 00s): sending is paused")


def test_an_expired_pause_is_not_reported(environ: dict[str, str], db: Db, capsys: Any) -> None:
    db.execute(
        """INSERT INTO sending_pauses (provider, reason, paused_at, paused_until, worker_id)
           VALUES ('resend', 'daily_quota_exceeded', now() - interval '2 days',
                   now() - interval '1 day', 'host:1:abc')"""
    )
    code, document = status_json(environ, capsys)
    assert (code, document["sending_pauses"]) == (0, [])


def test_a_provider_whose_recent_answers_are_all_retries_is_failing(
    environ: dict[str, str], db: Db, capsys: Any
) -> None:
    """A send at 40 min ago, then three retries (timeout, 503, connection error) since
    30 min ago: "provider failing since" the first of them, exit 1. One answer that
    shows the provider working (a rate limit) ends the run of failures."""
    key = insert_row(db, "in_1Failing", attempts=3, first_attempt_ago=timedelta(minutes=30))
    insert_attempt(db, key, attempt=1, started_ago=timedelta(minutes=40), outcome="sent")
    for n, (ago, http) in enumerate([(30, None), (20, 503), (10, None)], start=2):
        insert_attempt(db, key, attempt=n, started_ago=timedelta(minutes=ago),
                       http_status=http, outcome="retry")  # fmt: skip
    code, document = status_json(environ, capsys)
    assert code == 1
    failing = document["provider_failing"]
    assert failing is not None and failing["failures"] == 3
    assert any(p.startswith("provider failing since ") for p in document["needs_person"])
    assert main(["status"], environ) == 1
    assert "provider        failing since " in capsys.readouterr().out
    insert_attempt(db, key, attempt=5, started_ago=timedelta(minutes=5), http_status=429,
                   outcome="rate_limited")  # fmt: skip
    code, document = status_json(environ, capsys)
    assert (code, document["provider_failing"]) == (0, None)


def test_two_retries_or_old_ones_are_not_a_failing_provider(
    environ: dict[str, str], db: Db, capsys: Any
) -> None:
    """Fewer than three in a row, or none in the last hour: not flagged."""
    key = insert_row(db, "in_1Blip", attempts=2, first_attempt_ago=timedelta(hours=3))
    for n, ago in enumerate([180, 170, 160], start=1):
        insert_attempt(db, key, attempt=n, started_ago=timedelta(minutes=ago), outcome="retry")
    code, document = status_json(environ, capsys)
    assert (code, document["provider_failing"]) == (0, None)
