"""GET /metrics and the structured webhook log line: what monitoring sees."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from receipts.config import load_settings
from receipts.logs import configure_logging
from receipts.web import create_app
from tests import stripe_events
from tests.helpers import METRICS_AUTH, root_logger_restored
from tests.outbox_states import Db, insert_attempt, insert_row
from tests.stripe_events import TEST_SECRET, encode, sign

RESEND_SECRET = "whsec_" + base64.b64encode(b"receipts-resend-test-secret-32by").decode()

ROOT = Path(__file__).resolve().parents[2]


def scrape(
    client: FlaskClient | None = None, *, text: str | None = None
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample as {(name, sorted labels): value}."""
    if text is None:
        assert client is not None
        response = client.get("/metrics", headers=METRICS_AUTH)
        assert response.status_code == 200, response.data
        assert response.content_type.startswith("text/plain")
        text = response.get_data(as_text=True)
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def post_event(
    client: Any, event: dict[str, Any], secret: str = TEST_SECRET, url: str = "/webhooks/stripe"
) -> Any:
    body = encode(event)
    headers = {"Stripe-Signature": sign(body, secret), "Content-Type": "application/json"}
    return client.post(url, data=body, headers=headers)


def test_outbox_gauges_come_from_the_database(client: FlaskClient, db: Db) -> None:
    """Rows by status, open review by reason, oldest pending age, time left to the cutoff."""
    insert_row(db, "in_1M1", available_ago=timedelta(minutes=2))
    insert_row(db, "in_1M2", attempts=3, first_attempt_ago=timedelta(hours=22))
    insert_row(db, "in_1M3", status="review", review_reason="attempts_exhausted")
    insert_row(db, "in_1M4", status="review", review_reason="dismissed")
    insert_row(db, "in_1M5", status="sent", provider_id="re_1", sent_ago=timedelta(minutes=1))
    resent = insert_row(db, "in_1M6", status="review", review_reason="validation_error")
    db.execute(
        "UPDATE email_outbox SET resent_as = %s WHERE message_key = %s",
        (resent + "/resend-1", resent),
    )
    samples = scrape(client)
    assert value(samples, "receipts_database_up") == 1
    assert value(samples, "receipts_outbox_rows", status="pending") == 2
    assert value(samples, "receipts_outbox_rows", status="review") == 3
    assert value(samples, "receipts_outbox_rows", status="sent") == 1
    assert value(samples, "receipts_review_rows", reason="attempts_exhausted") == 1
    assert value(samples, "receipts_review_rows", reason="dismissed") == 1
    assert value(samples, "receipts_review_rows", reason="validation_error") is None
    assert value(samples, "receipts_review_open_rows") == 1
    assert value(samples, "receipts_review_resent_rows") == 1
    oldest = value(samples, "receipts_outbox_oldest_pending_age_seconds")
    assert oldest is not None and 119 < oldest < 180
    remaining = value(samples, "receipts_retry_cutoff_remaining_seconds")
    assert remaining is not None and 3540 < remaining <= 3600
    assert value(samples, "receipts_retry_cutoff_seconds") == 23 * 3600
    assert value(samples, "receipts_sent_1h") == 1


def test_sending_pause_failing_provider_and_lost_receipts_are_gauges(
    client: FlaskClient, db: Db
) -> None:
    """receipts_sending_paused, receipts_provider_failing and the not-delivered counts
    by status (failed, suppressed) come from the same reads as `receipts status`."""
    samples = scrape(client)
    assert value(samples, "receipts_sending_paused") == 0
    assert value(samples, "receipts_provider_failing") == 0
    assert value(samples, "receipts_sending_pause_remaining_seconds") is None
    db.execute(
        """INSERT INTO sending_pauses (provider, reason, paused_until, worker_id)
           VALUES ('resend', 'monthly_quota_exceeded', now() + interval '1 hour', 'w')"""
    )
    key = insert_row(db, "in_1Gauge", attempts=3, first_attempt_ago=timedelta(minutes=30))
    for n in range(1, 4):
        insert_attempt(db, key, attempt=n, started_ago=timedelta(minutes=30 - n),
                       http_status=502, outcome="retry")  # fmt: skip
    lost = insert_row(db, "in_1Lost", status="sent", provider_id="re_lost")
    db.execute(
        "UPDATE email_outbox SET delivery_status = 'suppressed', delivery_status_at = now()"
        " WHERE message_key = %s",
        (lost,),
    )
    db.execute(
        "INSERT INTO resend_events (svix_id, event_type, email_id, message_key, outcome)"
        " VALUES ('msg_s', 'email.suppressed', 're_lost', %s, 'applied')",
        (lost,),
    )
    samples = scrape(client)
    assert value(samples, "receipts_sending_paused") == 1
    left = value(samples, "receipts_sending_pause_remaining_seconds")
    assert left is not None and 3500 < left <= 3600
    assert value(samples, "receipts_provider_failing") == 1
    failing_for = value(samples, "receipts_provider_failing_seconds")
    assert failing_for is not None and 28 * 60 < failing_for < 30 * 60
    problems = {
        status: value(samples, "receipts_delivery_problems_24h", delivery_status=status)
        for status in ("bounced", "suppressed", "failed", "complained")
    }
    assert problems == {"bounced": 0, "suppressed": 1, "failed": 0, "complained": 0}


def test_provider_answers_and_latency_of_recent_attempts(client: FlaskClient, db: Db) -> None:
    """Answers by class and latency from email_attempts of the last 15 minutes only."""
    key = insert_row(db, "in_1Lat", status="sent", provider_id="re_1")
    recent = timedelta(minutes=1)
    insert_attempt(db, key, attempt=1, started_ago=recent, http_status=500, outcome="retry",
                   duration=timedelta(milliseconds=100))  # fmt: skip
    insert_attempt(db, key, attempt=2, started_ago=recent, http_status=None, outcome="retry",
                   duration=timedelta(seconds=10))  # fmt: skip
    insert_attempt(db, key, attempt=3, started_ago=recent, http_status=422, outcome="review",
                   duration=timedelta(milliseconds=200))  # fmt: skip
    insert_attempt(db, key, attempt=4, started_ago=recent, http_status=200, outcome="sent",
                   duration=timedelta(milliseconds=300))  # fmt: skip
    insert_attempt(db, key, attempt=5, started_ago=timedelta(hours=2), http_status=200)
    insert_attempt(db, key, attempt=6, started_ago=recent, http_status=None,
                   outcome="skipped_cutoff", duration=timedelta(0))  # fmt: skip
    samples = scrape(client)
    for answer in ("2xx", "4xx", "5xx", "timeout"):
        assert value(samples, "receipts_provider_answers", **{"class": answer}) == 1, answer
    assert value(samples, "receipts_provider_latency_seconds_count") == 4
    total = value(samples, "receipts_provider_latency_seconds_sum")
    assert total is not None and abs(total - 10.6) < 0.01
    median = value(samples, "receipts_provider_latency_quantile_seconds", quantile="0.5")
    assert median is not None and 0.2 <= median <= 0.3


def test_webhook_outcomes_are_counted(client: FlaskClient, db: Db) -> None:
    """Each Stripe delivery counts under its type, outcome and HTTP code; Stripe
    redelivering an event counts apart from a second event for the same invoice."""
    before = scrape(client)
    invoice = stripe_events.invoice()
    event = stripe_events.event(invoice)
    assert post_event(client, event).status_code == 200
    assert post_event(client, event).status_code == 200
    assert post_event(client, stripe_events.event(invoice)).status_code == 200
    assert post_event(client, stripe_events.event(), secret="whsec_wrong").status_code == 400
    after = scrape(client)

    def delta(**labels: str) -> float:
        name = "receipts_webhooks_total"
        return (value(after, name, **labels) or 0) - (value(before, name, **labels) or 0)

    assert delta(source="stripe", type="invoice.paid", outcome="queued", code="200") == 1
    assert delta(source="stripe", type="invoice.paid", outcome="redelivery", code="200") == 1
    assert delta(source="stripe", type="invoice.paid", outcome="duplicate", code="200") == 1
    assert delta(source="stripe", type="unknown", outcome="rejected", code="400") == 1


def test_a_scrape_survives_the_database_being_down(environ: dict[str, str]) -> None:
    """No database: 200 with receipts_database_up 0 and the process counters."""
    down = {**environ, "DATABASE_URL": "postgresql://postgres@127.0.0.1:1/none",
            "RECEIPTS_DATABASE_TIMEOUT": "0.5"}  # fmt: skip
    app = create_app(load_settings(down))
    try:
        samples = scrape(app.test_client())
    finally:
        app.extensions["receipts"].database.close()
    assert value(samples, "receipts_database_up") == 0
    assert value(samples, "receipts_outbox_rows", status="pending") is None


@pytest.fixture
def protected_app(environ: dict[str, str]) -> Iterator[Flask]:
    app = create_app(load_settings({**environ, "RECEIPTS_METRICS_TOKEN": "s3cret-token"}))
    yield app
    app.extensions["receipts"].database.close()


def test_a_token_protects_metrics(protected_app: Flask) -> None:
    """With RECEIPTS_METRICS_TOKEN: missing or wrong bearer token 401, right one 200."""
    client = protected_app.test_client()
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.headers["WWW-Authenticate"].startswith("Bearer")
    right = client.get("/metrics", headers={"Authorization": "Bearer s3cret-token"})
    assert right.status_code == 200 and b"receipts_database_up" in right.data


def test_metrics_can_be_disabled(environ: dict[str, str]) -> None:
    app = create_app(load_settings({**environ, "RECEIPTS_METRICS_ENABLED": "false"}))
    try:
        assert app.test_client().get("/metrics").status_code == 404
    finally:
        app.extensions["receipts"].database.close()


def test_json_log_line_of_a_webhook(client: FlaskClient, capsys: Any) -> None:
    """LOG_FORMAT=json: one JSON object per webhook with event id, key, outcome and
    latency, and never the invoice URL or the email body."""
    with root_logger_restored():
        configure_logging("json")
        invoice = stripe_events.invoice(id="in_1Logged")
        event = stripe_events.event(invoice)
        assert post_event(client, event).status_code == 200
    lines = [
        json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")
    ]
    [line] = [line for line in lines if line["message"] == "stripe webhook"]
    assert line["event_id"] == event["id"]
    assert line["key"] == "platform/test/in_1Logged/invoice-paid"
    assert line["outcome"] == "queued" and isinstance(line["ms"], float)
    raw = json.dumps(lines)
    assert invoice["hosted_invoice_url"] not in raw and "invoice.stripe.com" not in raw
    assert "jenny.rosen@example.com" not in raw and "Thank you" not in raw


# --- gunicorn: several worker processes, one set of counters -----------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def gunicorn_url(environ: dict[str, str], tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    log = tmp_path / "gunicorn.log"
    env = {**os.environ, **environ, "PORT": str(port), "WEB_CONCURRENCY": "3",
           "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prom")}  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "--bind", f"127.0.0.1:{port}",
         "wsgi:app"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb"),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                requests.get(url + "/healthz", timeout=1)
                break
            except requests.RequestException:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("gunicorn did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        _stop(process, log)


def test_gunicorn_workers_share_one_set_of_counters(gunicorn_url: str) -> None:
    """Under gunicorn with three worker processes every scrape reports all deliveries,
    whichever process answers it (PROMETHEUS_MULTIPROC_DIR + gunicorn.conf.py)."""
    deliveries = 12
    for _ in range(deliveries):
        fresh = requests.Session()  # a new connection, so the requests spread over workers
        response = post_event(fresh, stripe_events.event(), url=gunicorn_url + "/webhooks/stripe")
        assert response.status_code == 200
    for _ in range(4):
        text = requests.get(gunicorn_url + "/metrics", headers=METRICS_AUTH, timeout=5).text
        samples = scrape(text=text)
        queued = value(samples, "receipts_webhooks_total", source="stripe", type="invoice.paid",
                       outcome="queued", code="200")  # fmt: skip
        assert queued == deliveries
        assert value(samples, "receipts_outbox_rows", status="pending") == deliveries


def test_alert_rules_only_use_metrics_that_exist(client: FlaskClient, db: Db) -> None:
    """Every receipts_* series named in docs/alerts.yml is exported by /metrics."""
    insert_row(db, "in_1Alert", attempts=1, first_attempt_ago=timedelta(hours=1))
    # The reconcile gauges exist once a run was recorded.
    db.execute(
        "INSERT INTO reconcile_runs (started_at, window_start, accounts, apply, paid_invoices,"
        " missing, applied, result) VALUES (now(), now(), '{platform}', false, 1, 0, 0, 'clean')"
    )
    assert post_event(client, stripe_events.event()).status_code == 200
    exported = {name for name, _labels in scrape(client)}
    lines = (ROOT / "docs" / "alerts.yml").read_text().splitlines()
    rules = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
    used = set(re.findall(r"\breceipts_[a-z0-9_]+", rules))
    assert used and used <= exported, used - exported


@pytest.mark.parametrize("source", ["stripe", "resend"])
def test_a_refused_oversized_delivery_is_counted_with_the_status_sent(
    environ: dict[str, str], source: str
) -> None:
    """A body over RECEIPTS_MAX_BODY_BYTES is answered 413, and counted as 413: it
    used to be counted as a 500, so one large POST fired the webhook-5xx alert."""
    app = create_app(load_settings({**environ, "RESEND_WEBHOOK_SECRET": RESEND_SECRET}))
    try:
        client = app.test_client()
        before = scrape(client)
        body = b"{" + b" " * (1024 * 1024 + 10) + b"}"
        response = client.post(f"/webhooks/{source}", data=body)
        after = scrape(client)
    finally:
        app.extensions["receipts"].database.close()
    assert response.status_code == 413 and response.is_json

    def delta(code: str) -> float:
        return sum(
            value - before.get((name, labels), 0)
            for (name, labels), value in after.items()
            if name == "receipts_webhooks_total"
            and ("source", source) in labels
            and ("code", code) in labels
        )

    assert delta("413") == 1
    assert delta("500") == 0


def test_metrics_need_a_token_unless_scraped_on_their_own_port(environ: dict[str, str]) -> None:
    """/metrics on the webhook port used to be open by default (business counts to
    anyone, and a scrape flood slowed the webhooks). Without RECEIPTS_METRICS_TOKEN
    and without RECEIPTS_METRICS_PORT it is refused with 403 and a line saying
    which setting opens it."""
    bare = {name: value for name, value in environ.items() if name != "RECEIPTS_METRICS_TOKEN"}
    app = create_app(load_settings(bare))
    try:
        answer = app.test_client().get("/metrics")
    finally:
        app.extensions["receipts"].database.close()
    assert answer.status_code == 403
    text = answer.get_data(as_text=True)
    assert "RECEIPTS_METRICS_TOKEN" in text and "RECEIPTS_METRICS_PORT" in text
    assert "receipts_" not in text


def test_a_private_metrics_port_serves_metrics_without_a_token(
    environ: dict[str, str], tmp_path: Path
) -> None:
    """With RECEIPTS_METRICS_PORT, gunicorn (shipped gunicorn.conf.py) also listens
    on that port, on 127.0.0.1 unless a host is given, and /metrics answers there
    without a token. On the public port it still needs the token: a Host header
    naming the private port changes nothing, because the port a request came in
    on is read from its socket."""
    public, private = _free_port(), _free_port()
    log = tmp_path / "gunicorn.log"
    bare = {name: value for name, value in environ.items() if name != "RECEIPTS_METRICS_TOKEN"}
    env = {**os.environ, **bare, "PORT": str(public), "RECEIPTS_METRICS_PORT": str(private),
           "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prom")}  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "--bind",
         f"127.0.0.1:{public}", "wsgi:app"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb"),
    )  # fmt: skip
    try:
        _wait_for_http(f"http://127.0.0.1:{private}/healthz", process)
        scraped = requests.get(f"http://127.0.0.1:{private}/metrics", timeout=5)
        on_public = requests.get(f"http://127.0.0.1:{public}/metrics", timeout=5)
        spoofed = requests.get(
            f"http://127.0.0.1:{public}/metrics",
            headers={"Host": f"127.0.0.1:{private}"},
            timeout=5,
        )
    finally:
        _stop(process, log)
    assert scraped.status_code == 200
    assert value(scrape(text=scraped.text), "receipts_database_up") == 1
    assert on_public.status_code == 403 and spoofed.status_code == 403


def _stop(process: subprocess.Popen[bytes], log: Path) -> None:
    """SIGTERM, then wait past gunicorn's 30 s graceful timeout (after which it kills
    its own workers); a server still running then fails the test with its log."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=40)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        tail = log.read_text(errors="replace")[-3000:]
        raise AssertionError(f"gunicorn did not stop within 40 s of SIGTERM:\n{tail}") from None


def _wait_for_http(url: str, process: subprocess.Popen[bytes], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            requests.get(url, timeout=1)
            return
        except requests.RequestException:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gunicorn did not answer on {url}") from None
            time.sleep(0.1)
