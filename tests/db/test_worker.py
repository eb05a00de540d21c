"""The worker in-process against real PostgreSQL and a real fake-Resend HTTP server.

Every row of the outcome table in docs/architecture.md ("What each provider
answer does") end to end, the retry cutoff, the attempt budget, lease expiry
and recovery, a lost lease, NOTIFY wake-ups, the send rate cap and graceful
stop. The table itself, without a database, is tests/unit/test_decisions.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from receipts import queries
from receipts.config import Settings, load_settings
from receipts.delivery.pacing import RATE_MARGIN
from receipts.delivery.providers.resend import ResendProvider
from receipts.delivery.summary import WorkerSummary
from tests import stripe_events
from tests.fake_provider import FakeProviderClient
from tests.helpers import ManualClock, wait_for
from tests.outbox_states import insert_pending
from tests.outbox_states import row as outbox_row
from tests.stripe_events import TEST_SECRET, encode, sign
from tests.tcp_proxy import proxy_to, through_proxy
from tests.worker_runs import API_KEY, patient, work, work_in_background

Row = dict[str, Any]
DB = psycopg.Connection[Row]
# The listener's statement, as the server records it, starts with its name line.
LISTEN_STATEMENT = queries.load("delivery")["listen"].splitlines()[0] + "\n"


def attempts(db: DB, key: str) -> list[Row]:
    return db.execute(
        "SELECT * FROM email_attempts WHERE message_key = %s ORDER BY id", (key,)
    ).fetchall()


def outcomes(db: DB, key: str) -> list[str | None]:
    return [attempt["outcome"] for attempt in attempts(db, key)]


# --- the happy path ----------------------------------------------------------------


def test_drains_every_ready_row_to_sent_and_a_second_run_sends_nothing(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """Each row ends sent with the id of its one delivery and one finished attempt;
    a second run finds nothing to send."""
    keys = insert_pending(db, 25)
    summary = work(worker_settings)
    assert (summary.sent, summary.retried, summary.review, summary.error) == (25, 0, 0, None)
    delivered = {d["key"]: d["id"] for d in fake.deliveries()}
    for key in keys:
        row = outbox_row(db, key)
        assert row["status"] == "sent" and row["provider_id"] == delivered[key]
        assert row["sent_at"] is not None and row["lease_token"] is None
        assert row["attempts"] == 1 and row["first_attempt_at"] is not None
        [attempt] = attempts(db, key)
        assert (attempt["outcome"], attempt["http_status"], attempt["attempt"]) == ("sent", 200, 1)
        assert attempt["provider_id"] == row["provider_id"] and attempt["finished_at"]
    assert work(worker_settings).sent == 0
    assert fake.stats()["requests"] == 25


def test_sends_the_stored_payload_byte_for_byte(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """The provider receives the frozen payload exactly as stored, under the message key."""
    [key] = insert_pending(db, 1)
    stored = db.execute(
        "SELECT payload::text AS text FROM email_outbox WHERE message_key = %s", (key,)
    ).fetchone()
    work(worker_settings)
    [delivery] = fake.deliveries()
    assert stored is not None and delivery["body"] == stored["text"]
    assert delivery["key"] == key


def test_sends_run_concurrently_up_to_the_concurrency(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """With every request held at the provider, four are in flight at once and no
    fifth starts; released, all 24 are sent, never more than four at a time."""
    fake.configure(hold="senders")
    insert_pending(db, 24)
    with work_in_background(patient(worker_settings), concurrency=4) as result:
        wait_for(lambda: fake.held("senders") == 4, what="four sends held at once")
        assert fake.stats()["requests"] == 4
        fake.release("senders")
    assert result[0].sent == 24 and fake.stats()["max_in_flight"] == 4


def test_the_send_rate_cap_spaces_requests(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """With RECEIPTS_SEND_RATE=10 and eight senders waiting, one request goes out
    each time the worker's clock has moved one interval (1.05/10 s), and not
    a second one: ten rows, ten steps of the clock."""
    clock = ManualClock()
    interval = (1 + RATE_MARGIN) / 10.0
    insert_pending(db, 10)
    settings = replace(worker_settings, send_rate=10.0)

    def requests_reach(count: int) -> Callable[[], bool]:
        return lambda: fake.stats()["requests"] >= count

    with work_in_background(settings, concurrency=8, clock=clock) as result:
        for sent in range(1, 11):
            wait_for(requests_reach(sent), what=f"request {sent}")
            assert fake.stats()["requests"] == sent
            clock.advance(1.01 * interval)
    assert result[0].sent == 10


def test_a_rate_cap_that_lets_the_worker_hold_few_rows_still_drains(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """At 0.5 sends/s only one row fits inside a 5 s lease: the worker holds one
    row at a time and sends both, instead of waiting for a batch that never fits."""
    clock = ManualClock()
    insert_pending(db, 2)
    settings = replace(worker_settings, send_rate=0.5)
    with work_in_background(settings, max_seconds=10, clock=clock) as result:
        wait_for(lambda: fake.stats()["requests"] == 1, what="the first send")
        clock.advance(2.1)  # the next slot (1.05 / 0.5 s later)
        wait_for(lambda: fake.stats()["requests"] == 2, what="the second send")
    assert (result[0].sent, result[0].released) == (2, 0)


# --- every provider answer --------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "http_status", "error"),
    [
        ({"status": 500}, 500, "http_500"),
        ({"status": 503, "name": "service_unavailable"}, 503, "service_unavailable"),
        ({"status": 409, "name": "concurrent_idempotent_requests"}, 409, None),
        ({"no_id": True}, 200, "no_provider_id"),
        ({"hold": "until-the-test-ends"}, None, "timeout"),
    ],
)
def test_answers_that_can_be_retried_leave_the_row_pending_with_a_backoff(
    db: DB,
    fake: FakeProviderClient,
    worker_settings: Settings,
    script: dict[str, Any],
    http_status: int | None,
    error: str | None,
) -> None:
    """5xx, 409 key in progress, 2xx without id and a timeout: the row is
    pending again after the first backoff, the attempt counted and logged retry."""
    [key] = insert_pending(db, 1)
    fake.script(script)
    summary = work(worker_settings)
    row = outbox_row(db, key)
    assert summary.retried == 1 and summary.sent == 0
    assert row["status"] == "pending" and row["attempts"] == 1 and row["lease_token"] is None
    assert row["last_error"] == (error or "concurrent_idempotent_requests")
    waited = db.execute(
        "SELECT extract(epoch FROM available_at - now()) AS s FROM email_outbox"
    ).fetchone()
    assert waited is not None and 4 < waited["s"] <= 15  # 15 s first backoff, half jittered
    [attempt] = attempts(db, key)
    assert (attempt["outcome"], attempt["http_status"]) == ("retry", http_status)
    assert attempt["finished_at"] is not None


def test_a_refused_connection_leaves_the_row_pending(db: DB, worker_settings: Settings) -> None:
    """A provider that cannot be reached is a retry, recorded as connection_error."""
    [key] = insert_pending(db, 1)
    closed = replace(worker_settings, resend_api_url="http://127.0.0.1:9")
    assert work(closed).retried == 1
    row = outbox_row(db, key)
    assert (row["status"], row["last_error"]) == ("pending", "connection_error")


def test_retry_after_is_honoured(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """A 429 with Retry-After: 120 makes the row wait 120 s, not the 15 s backoff,
    and a rate limit costs the row no attempt."""
    [key] = insert_pending(db, 1)
    fake.script({"status": 429, "name": "rate_limit_exceeded", "headers": {"Retry-After": "120"}})
    assert work(worker_settings).rate_limited == 1
    waited = db.execute(
        "SELECT extract(epoch FROM available_at - now()) AS s FROM email_outbox"
    ).fetchone()
    assert waited is not None and 115 < waited["s"] <= 120
    assert (outbox_row(db, key)["status"], outbox_row(db, key)["attempts"]) == ("pending", 0)
    [attempt] = attempts(db, key)
    assert (attempt["outcome"], attempt["http_status"]) == ("rate_limited", 429)


def test_a_429_pauses_every_send_of_the_worker_for_retry_after(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """The other rows are not sent until the provider's Retry-After has passed on
    the worker's clock; the refused row, refunded, is due once it has passed in
    the database too, and a later run sends it."""
    clock = ManualClock()
    keys = insert_pending(db, 4)
    fake.script({"status": 429, "name": "rate_limit_exceeded", "headers": {"Retry-After": "60"}})
    settings = replace(worker_settings, lease_seconds=300)  # the rows wait out the pause
    with work_in_background(settings, concurrency=1, clock=clock) as result:
        wait_for(lambda: any("rate_limited" in outcomes(db, key) for key in keys))
        clock.advance(59.9)
        assert fake.stats()["requests"] == 1
        clock.advance(0.1)
    [refused] = [key for key in keys if outcomes(db, key)[0] == "rate_limited"]
    others = [key for key in keys if key != refused]
    assert (result[0].rate_limited, result[0].sent) == (1, 3)
    assert {outbox_row(db, key)["status"] for key in others} == {"sent"}
    row = outbox_row(db, refused)
    assert (row["status"], row["attempts"]) == ("pending", 0)
    waited = db.execute(
        "SELECT extract(epoch FROM available_at - now()) AS s FROM email_outbox"
        " WHERE message_key = %s",
        (refused,),
    ).fetchone()
    assert waited is not None and 50 < waited["s"] <= 60
    db.execute("UPDATE email_outbox SET available_at = now()")
    assert work(worker_settings).sent == 1


def test_a_retried_row_is_sent_by_a_later_run(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """A row left pending by a 5xx is sent by the next run once due, as attempt 2."""
    [key] = insert_pending(db, 1)
    fake.script({"status": 500})
    work(worker_settings)
    db.execute("UPDATE email_outbox SET available_at = now()")
    assert work(worker_settings).sent == 1
    row = outbox_row(db, key)
    assert (row["status"], row["attempts"]) == ("sent", 2)
    assert [a["outcome"] for a in attempts(db, key)] == ["retry", "sent"]


def test_key_reused_with_another_body_goes_to_review(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """409 invalid_idempotent_request: never mint a new key, a person decides."""
    [key] = insert_pending(db, 1)
    other = ResendProvider(api_url=fake.url, api_key=API_KEY, connect_timeout=1, read_timeout=1)
    other.send(key, b'{"from": "a@example.com", "to": ["b@example.com"], "subject": "x"}')
    summary = work(worker_settings)
    row = outbox_row(db, key)
    assert summary.review == 1
    assert (row["status"], row["review_reason"]) == ("review", "invalid_idempotent_request")
    [attempt] = attempts(db, key)
    assert (attempt["outcome"], attempt["http_status"]) == ("review", 409)
    assert attempt["provider_error"] == "invalid_idempotent_request"
    assert fake.stats()["deliveries"] == 1


def test_a_4xx_about_the_message_goes_to_review_with_the_provider_error(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """A 422 goes to review with the provider's error name as the reason."""
    [key] = insert_pending(db, 1)
    fake.script({"status": 422, "name": "validation_error"})
    work(worker_settings)
    row = outbox_row(db, key)
    assert (row["status"], row["review_reason"]) == ("review", "validation_error")


def test_a_bad_api_key_stops_the_run_and_leaves_rows_pending(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """401/403 must not push every row to review, nor burn their attempt budget."""
    keys = insert_pending(db, 30)
    summary = work(replace(worker_settings, resend_api_key="re_revoked"), concurrency=2)
    assert summary.exit_code == 2 and summary.error is not None
    assert "RESEND_API_KEY" in summary.error
    assert summary.sent == 0 and summary.review == 0
    assert fake.stats()["requests"] <= 2  # stopped at once, not one 403 per row
    statuses = db.execute(
        "SELECT status, attempts, count(*) AS n FROM email_outbox GROUP BY 1, 2"
    ).fetchall()
    assert statuses == [{"status": "pending", "attempts": 0, "n": len(keys)}]
    outcomes = db.execute(
        "SELECT outcome, http_status FROM email_attempts WHERE outcome IS NOT NULL"
    ).fetchall()
    assert outcomes and all(o["outcome"] in ("config_error", "released") for o in outcomes)
    assert {"outcome": "config_error", "http_status": 403} in outcomes


# --- cutoff, budget, leases -------------------------------------------------------


def test_a_row_past_the_retry_cutoff_goes_to_review_without_a_call(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """First attempted more than 23 h ago: review (retry_window_elapsed) at claim
    time, no request, the skipped attempt logged with the number not made."""
    [key] = insert_pending(db, 1)
    db.execute(
        """UPDATE email_outbox
              SET attempts = 3, first_attempt_at = now() - interval '23 hours 1 minute'"""
    )
    summary = work(worker_settings)
    row = outbox_row(db, key)
    assert summary.review == 1 and fake.stats()["requests"] == 0
    assert (row["status"], row["review_reason"], row["attempts"]) == (
        "review",
        "retry_window_elapsed",
        3,
    )
    [attempt] = attempts(db, key)
    assert (attempt["outcome"], attempt["attempt"]) == ("skipped_cutoff", 4)


def test_a_row_inside_the_cutoff_is_still_sent(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """A row first attempted just under 23 h ago is still sent."""
    [key] = insert_pending(db, 1)
    db.execute("UPDATE email_outbox SET first_attempt_at = now() - interval '22 hours 59 minutes'")
    assert work(worker_settings).sent == 1
    assert outbox_row(db, key)["status"] == "sent"


def test_a_row_with_its_attempt_budget_spent_goes_to_review_without_a_call(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """A row with 10 attempts goes to review (attempts_exhausted) unsent; the
    fresh row beside it is sent."""
    [spent, fresh] = insert_pending(db, 2)
    db.execute(
        "UPDATE email_outbox SET attempts = 10, first_attempt_at = now() WHERE message_key = %s",
        (spent,),
    )
    summary = work(worker_settings)
    assert (summary.review, summary.sent) == (1, 1)
    assert fake.stats()["requests_by_key"] == {fresh: 1}
    row = outbox_row(db, spent)
    assert (row["status"], row["review_reason"]) == ("review", "attempts_exhausted")
    assert [a["outcome"] for a in attempts(db, spent)] == ["skipped_budget"]


def test_a_claim_full_of_rows_for_review_does_not_end_the_drain(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """Rows moved to review fill a claim; the rows behind them are still sent."""
    spent = insert_pending(db, 12, prefix="in_1Spent")
    fresh = insert_pending(db, 2, prefix="in_1Fresh")
    db.execute(
        """UPDATE email_outbox SET attempts = 10, first_attempt_at = now(),
                  available_at = now() - interval '1 hour'
            WHERE message_key = ANY(%s)""",
        (spent,),
    )
    summary = work(worker_settings, concurrency=1)
    assert (summary.review, summary.sent) == (12, 2)
    assert sorted(fake.stats()["requests_by_key"]) == fresh


def test_the_retry_cutoff_is_measured_from_the_first_claim(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """first_attempt_at is written by the first claim and never moved by later ones."""
    [key] = insert_pending(db, 1)
    fake.script({"status": 500})
    work(worker_settings)
    first = outbox_row(db, key)["first_attempt_at"]
    db.execute("UPDATE email_outbox SET available_at = now()")
    work(worker_settings)
    assert outbox_row(db, key)["first_attempt_at"] == first


def test_an_expired_lease_is_claimed_again_and_the_dead_attempt_stays_ambiguous(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """A row whose worker died is claimed again once its lease expires and sent as
    attempt 2; the dead attempt keeps its NULL outcome and finished_at."""
    [key] = insert_pending(db, 1)
    db.execute(
        """WITH dead AS (
               UPDATE email_outbox
                  SET status = 'processing', lease_token = gen_random_uuid(), attempts = 1,
                      first_attempt_at = now() - interval '10 minutes',
                      locked_until = now() - interval '1 second'
            RETURNING message_key, lease_token)
           INSERT INTO email_attempts (message_key, attempt, worker_id, lease_token, started_at)
           SELECT message_key, 1, 'dead-worker', lease_token, now() - interval '10 minutes'
             FROM dead"""
    )
    assert work(worker_settings).sent == 1
    row = outbox_row(db, key)
    assert (row["status"], row["attempts"]) == ("sent", 2)
    dead, recovered = attempts(db, key)
    assert dead["outcome"] is None and dead["finished_at"] is None
    assert (recovered["outcome"], recovered["attempt"]) == ("sent", 2)


def test_a_live_lease_is_not_claimed(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """A row leased to another worker until a minute from now is left alone."""
    [key] = insert_pending(db, 1)
    db.execute(
        """UPDATE email_outbox SET status = 'processing', lease_token = gen_random_uuid(),
                  attempts = 1, first_attempt_at = now(),
                  locked_until = now() + interval '1 minute'"""
    )
    assert work(worker_settings).sent == 0
    assert fake.stats()["requests"] == 0
    assert outbox_row(db, key)["status"] == "processing"


def test_a_lost_lease_is_counted_and_never_overwrites_the_new_holder(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """Another worker took the row over while the provider was answering."""
    [key] = insert_pending(db, 1)
    fake.script({"hold_answer": "answer"})  # accepted and delivered; answered when released
    with work_in_background(patient(worker_settings)) as result:
        wait_for(lambda: fake.held("answer") == 1, what="the delivery, its answer held")
        new_token = db.execute(
            """UPDATE email_outbox SET lease_token = gen_random_uuid(),
                      locked_until = now() + interval '1 minute'
                RETURNING lease_token"""
        ).fetchone()
        fake.release("answer")
    assert result[0].lease_lost == 1 and result[0].sent == 0
    row = outbox_row(db, key)
    assert new_token is not None and row["lease_token"] == new_token["lease_token"]
    assert row["status"] == "processing" and row["provider_id"] is None
    [attempt] = attempts(db, key)
    assert (attempt["outcome"], attempt["http_status"]) == ("lease_lost", 200)
    assert attempt["provider_id"] == fake.deliveries()[0]["id"]


def test_an_answer_the_database_could_not_take_is_written_once_it_is_back(
    db: DB,
    fake: FakeProviderClient,
    worker_settings: Settings,
    database_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The provider accepted the email, then the database path went away before the
    answer was written: the recorder tries again while the lease holds, so the row is
    sent with the provider's id, not sent a second time after the lease."""
    [key] = insert_pending(db, 1)
    proxy = proxy_to(database_url)
    # a borrow gives up after 1 s, so the recorder's first write fails soon
    settings = replace(
        patient(worker_settings),
        database_url=through_proxy(database_url, proxy),
        database_timeout=1.0,
    )
    fake.script({"hold_answer": "answer"})
    try:
        with work_in_background(settings) as result:
            wait_for(lambda: fake.held("answer") == 1, what="the delivery, its answer held")
            proxy.refuse(True)
            proxy.cut()
            fake.release("answer")
            wait_for(
                lambda: any("could not record" in r.getMessage() for r in caplog.records),
                what="the recorder to fail once",
            )
            proxy.refuse(False)
    finally:
        proxy.close()
    assert result[0].sent == 1 and result[0].unrecorded == 0
    assert result[0].record_retries >= 1
    row = outbox_row(db, key)
    assert row["status"] == "sent" and row["provider_id"] == fake.deliveries()[0]["id"]
    assert fake.stats()["requests"] == 1


# --- loop mode and stopping -------------------------------------------------------


def post_paid_invoice(client: FlaskClient) -> str:
    body = encode(stripe_events.event())
    response = client.post(
        "/webhooks/stripe",
        data=body,
        headers={"Stripe-Signature": sign(body, TEST_SECRET), "Content-Type": "application/json"},
    )
    assert response.status_code == 200
    key: str = response.json["message_key"]  # type: ignore[index]
    return key


def listening(db: DB) -> bool:
    """A connection of this database has run the worker's named LISTEN statement."""
    found = db.execute(
        "SELECT 1 FROM pg_stat_activity"
        " WHERE datname = current_database() AND starts_with(query, %s)",
        (LISTEN_STATEMENT,),
    ).fetchone()
    return found is not None


def test_loop_mode_is_woken_by_notify_and_stops_on_request(
    db: DB, fake: FakeProviderClient, worker_settings: Settings, client: FlaskClient
) -> None:
    """A 60 s poll interval: only NOTIFY can get the new row sent within seconds."""
    stop = threading.Event()
    result: list[WorkerSummary] = []
    runner = threading.Thread(
        target=lambda: result.append(
            work(worker_settings, loop=True, stop_event=stop, poll_seconds=60)
        )
    )
    runner.start()
    try:
        wait_for(lambda: listening(db))
        # Well within the 60 s poll: only a NOTIFY can have woken it.
        first = post_paid_invoice(client)
        wait_for(lambda: outbox_row(db, first)["status"] == "sent", timeout=30)
        second = post_paid_invoice(client)
        wait_for(lambda: outbox_row(db, second)["status"] == "sent", timeout=30)
    finally:
        stop.set()
        runner.join(timeout=10)
    assert not runner.is_alive()
    assert result[0].sent == 2


def released_attempts(db: DB) -> int:
    found = db.execute("SELECT count(*) AS n FROM email_attempts WHERE outcome = 'released'")
    row = found.fetchone()
    return row["n"] if row else 0


def one_send_in_flight_and_claimed_rows_waiting(settings: Settings) -> Settings:
    """Two senders, a slot every 105 s of the worker's clock (which the test never
    moves that far) and a lease long enough to wait for it: the first send goes
    out at once and the other claimed rows wait for a slot."""
    return replace(patient(settings, lease_seconds=600), send_rate=0.01)


def test_stop_finishes_sends_in_flight_and_leaves_the_rest_pending(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """Setting the stop event mid-run: the send in flight finishes, the claimed rows
    waiting for a slot are let go unsent, the other rows stay pending, and no
    attempt is left without an outcome."""
    insert_pending(db, 20)
    fake.script({"hold": "in-flight"})
    stop = threading.Event()
    settings = one_send_in_flight_and_claimed_rows_waiting(worker_settings)
    with work_in_background(
        settings, stop_event=stop, concurrency=2, clock=ManualClock()
    ) as result:
        wait_for(lambda: fake.held("in-flight") == 1, what="the first send held")
        stop.set()
        wait_for(lambda: released_attempts(db) > 0, what="the waiting rows let go")
        fake.release("in-flight")
    counts = {
        row["status"]: row["n"]
        for row in db.execute("SELECT status, count(*) AS n FROM email_outbox GROUP BY 1")
    }
    assert counts == {"sent": 1, "pending": 19} and result[0].sent == 1
    assert result[0].released == released_attempts(db)
    assert db.execute(
        "SELECT count(*) AS n FROM email_attempts WHERE outcome IS NULL"
    ).fetchone() == {"n": 0}


def test_max_seconds_stops_and_releases_the_rows_waiting_for_a_slot(
    db: DB, fake: FakeProviderClient, worker_settings: Settings
) -> None:
    """A cron run ends on time (by its clock): the send in progress finishes, claimed
    rows not yet sent go back to pending without spending an attempt."""
    insert_pending(db, 50)
    fake.script({"hold": "in-flight"})
    clock = ManualClock()
    settings = one_send_in_flight_and_claimed_rows_waiting(worker_settings)
    with work_in_background(settings, concurrency=2, max_seconds=10, clock=clock) as result:
        wait_for(lambda: fake.held("in-flight") == 1, what="the first send held")
        clock.advance(10)
        wait_for(lambda: released_attempts(db) > 0, what="the waiting rows let go")
        fake.release("in-flight")
    summary = result[0]
    assert (summary.sent, summary.error) == (1, None) and summary.released > 0
    rows = db.execute(
        "SELECT status, max(attempts) AS attempts FROM email_outbox GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert rows == [{"status": "pending", "attempts": 0}, {"status": "sent", "attempts": 1}]
    assert fake.stats()["requests"] == 1


# --- the file sink -----------------------------------------------------------------


def test_the_file_sink_worker_writes_one_eml_per_receipt(
    db: DB, database_url: str, tmp_path: Path, pooling: dict[str, str]
) -> None:
    """Without an API key the worker writes one .eml per receipt; sending the
    same keys again writes nothing new (the sink is idempotent like Resend)."""
    insert_pending(db, 3)
    settings = load_settings(
        {**pooling, "DATABASE_URL": database_url, "RECEIPTS_MAIL_DIR": str(tmp_path)}
    )
    assert work(settings).sent == 3
    db.execute("UPDATE email_outbox SET status = 'pending', available_at = now()")
    assert work(settings).sent == 3  # the same keys again: the sink writes nothing new
    assert len(list(tmp_path.glob("*.eml"))) == 3


@pytest.mark.parametrize(
    "recipient", ["a@[b.com", "=?utf-8?q?evil=40evil.example=2C?=@example.com"]
)
def test_the_file_sink_sends_a_recipient_it_cannot_write_to_review(
    db: DB, database_url: str, tmp_path: Path, recipient: str
) -> None:
    """A stored recipient the .eml sink cannot write as one address is a problem of
    that message: the row goes to review, it is not left in processing, no file is
    written, and the other rows are still sent."""
    bad, good = insert_pending(db, 2)
    # Such a recipient can only be in a row an older release stored: plant it past
    # the trigger that keeps a stored email from changing.
    db.execute("ALTER TABLE email_outbox DISABLE TRIGGER email_outbox_payload_frozen")
    db.execute(
        "UPDATE email_outbox SET payload = jsonb_set(payload, '{to}', jsonb_build_array(%s::text))"
        " WHERE message_key = %s",
        (recipient, bad),
    )
    db.execute("ALTER TABLE email_outbox ENABLE TRIGGER email_outbox_payload_frozen")
    settings = load_settings({"DATABASE_URL": database_url, "RECEIPTS_MAIL_DIR": str(tmp_path)})
    work(settings)
    assert (outbox_row(db, bad)["status"], outbox_row(db, bad)["review_reason"]) == (
        "review",
        "validation_error",
    )
    assert outbox_row(db, good)["status"] == "sent"
    assert len(list(tmp_path.glob("*.eml"))) == 1
