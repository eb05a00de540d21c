"""RECEIPTS_MODES: which Stripe modes' events are emailed; the other's are recorded as ignored."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from receipts.config import load_settings
from receipts.environment import ConfigError
from receipts.web import create_app
from tests import stripe_events
from tests.stripe_events import TEST_SECRET, encode, sign

DB = psycopg.Connection[dict[str, Any]]


@pytest.fixture
def live_only(environ: dict[str, str]) -> Iterator[FlaskClient]:
    app = create_app(load_settings({**environ, "RECEIPTS_MODES": "live"}))
    try:
        yield app.test_client()
    finally:
        app.extensions["receipts"].database.close()


def deliver(client: FlaskClient, event: dict[str, Any]) -> dict[str, Any]:
    body = encode(event)
    response = client.post(
        "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
    )
    assert response.status_code == 200 and response.json is not None, response.json
    answer: dict[str, Any] = response.json
    return answer


def test_live_only_records_a_test_mode_event_as_ignored_and_emails_live_ones(
    live_only: FlaskClient, db: DB
) -> None:
    """A test-mode payment (a developer's `stripe trigger` against production) is recorded
    with the reason support will read, and makes no row; a live one is queued."""
    test_event = stripe_events.event(stripe_events.invoice(id="in_1TestMode"))
    live_event = stripe_events.event(stripe_events.invoice(id="in_1LiveMode"), livemode=True)
    assert deliver(live_only, test_event)["outcome"] == "ignored"
    assert deliver(live_only, live_event)["outcome"] == "queued"
    keys = [row["message_key"] for row in db.execute("SELECT message_key FROM email_outbox")]
    assert keys == ["platform/live/in_1LiveMode/invoice-paid"]
    recorded = db.execute(
        "SELECT outcome, detail FROM stripe_events WHERE event_id = %s", (test_event["id"],)
    ).fetchone()
    assert recorded == {"outcome": "ignored", "detail": "test_mode_off"}


@pytest.mark.parametrize(
    ("value", "modes"),
    [
        (None, {"live", "test"}),
        ("live", {"live"}),
        (" Test ", {"test"}),
        ("live,test", {"live", "test"}),
    ],
)
def test_modes_are_read_from_the_setting(value: str | None, modes: set[str]) -> None:
    environ = {} if value is None else {"RECEIPTS_MODES": value}
    assert load_settings(environ).modes == modes


@pytest.mark.parametrize("value", ["production", "live,staging", ","])
def test_an_unknown_mode_is_refused_by_name(value: str) -> None:
    with pytest.raises(ConfigError, match="RECEIPTS_MODES"):
        load_settings({"RECEIPTS_MODES": value})
