"""`receipts backfill` against the fake Stripe API (a real HTTP server) and a real database:
lost invoice.paid events become receipts through the webhook's path, exactly once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from receipts.cli import main
from receipts.stripe_api import client as stripe_client
from tests import stripe_events
from tests.fake_stripe_api import FakeStripeClient, running_fake_stripe_api
from tests.stripe_events import TEST_SECRET, encode, sign

Row = dict[str, Any]
DB = psycopg.Connection[Row]
API_KEY = "rk_test_backfill"


@pytest.fixture
def stripe_api() -> Iterator[FakeStripeClient]:
    with running_fake_stripe_api(API_KEY) as fake:
        yield fake


@pytest.fixture
def api_environ(environ: dict[str, str], stripe_api: FakeStripeClient) -> dict[str, str]:
    return {**environ, "STRIPE_API_KEY": API_KEY, "STRIPE_API_BASE": stripe_api.url}


def lost_event(stripe_api: FakeStripeClient, n: int, *, account: str | None = None,
               delivered: bool = False) -> Row:  # fmt: skip
    """An invoice.paid event in the Events API, as Stripe keeps it after failed deliveries."""
    event = stripe_events.event(
        stripe_events.invoice(id=f"in_1Lost{n:04d}", customer="cus_1Lost"),
        event_id=f"evt_1Lost{n:04d}",
    )
    event["created"] = int(time.time()) - 3600 + n
    stripe_api.add_event(event, delivered=delivered, account=account or "platform")
    return event


def backfill(environ: dict[str, str], *args: str) -> int:
    return main(["backfill", "--since", "72h", *args], environ)


def outbox_keys(db: DB) -> list[str]:
    return [r["message_key"] for r in db.execute("SELECT message_key FROM email_outbox ORDER BY 1")]


def test_three_undelivered_events_become_three_receipts_and_a_rerun_adds_nothing(
    api_environ: dict[str, str], stripe_api: FakeStripeClient, db: DB,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Three lost events -> three pending receipts recorded as coming from backfill; the
    second run finds them stored and changes nothing (not even a delivery count)."""
    events = [lost_event(stripe_api, n) for n in range(3)]
    assert backfill(api_environ) == 0
    first = capsys.readouterr().out
    assert "3 found: queued 3, duplicate 0" in first
    for event in events:
        assert f"{event['id']}  {event['data']['object']['id']}  queued" in first
    assert outbox_keys(db) == [f"platform/test/in_1Lost{n:04d}/invoice-paid" for n in range(3)]
    recorded = db.execute("SELECT source, deliveries FROM stripe_events").fetchall()
    assert recorded == [{"source": "backfill", "deliveries": 1}] * 3
    assert backfill(api_environ) == 0
    second = capsys.readouterr().out
    assert "3 found: queued 0, duplicate 0, review 0, ignored 0, conflict 0, already stored 3" in (
        second
    )
    assert len(outbox_keys(db)) == 3
    assert db.execute("SELECT sum(deliveries) AS n FROM stripe_events").fetchone() == {"n": 3}


def test_an_event_the_webhook_stored_is_left_alone(
    api_environ: dict[str, str], stripe_api: FakeStripeClient, client: FlaskClient, db: DB,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Still "undelivered" for Stripe (another endpoint failed) but stored here: reported as
    already stored; a different event of the same invoice is a duplicate."""
    stored = lost_event(stripe_api, 1)
    body = encode(stored)
    headers = {"Stripe-Signature": sign(body, TEST_SECRET)}
    assert client.post("/webhooks/stripe", data=body, headers=headers).status_code == 200
    sibling = stripe_events.event(stored["data"]["object"], event_id="evt_1Sibling")
    sibling["created"] = stored["created"]
    stripe_api.add_event(sibling)
    assert backfill(api_environ) == 0
    out = capsys.readouterr().out
    assert "evt_1Lost0001  in_1Lost0001  already stored (queued)" in out
    assert "evt_1Sibling  in_1Lost0001  duplicate" in out
    assert len(outbox_keys(db)) == 1


def test_delivered_events_are_skipped_unless_all(
    api_environ: dict[str, str], stripe_api: FakeStripeClient, db: DB
) -> None:
    """delivery_success=false by default; --all also takes delivered events."""
    lost_event(stripe_api, 1, delivered=True)
    assert backfill(api_environ) == 0
    assert outbox_keys(db) == []
    assert backfill(api_environ, "--all") == 0
    assert outbox_keys(db) == ["platform/test/in_1Lost0001/invoice-paid"]


def test_connect_accounts_are_read_with_their_account_and_keyed_by_it(
    api_environ: dict[str, str], stripe_api: FakeStripeClient, db: DB
) -> None:
    """--account acct_…: that account's events, listed with Stripe-Account, keyed by it as
    its Connect webhook would be."""
    lost_event(stripe_api, 1)
    lost_event(stripe_api, 2, account="acct_1Conn")
    assert backfill(api_environ, "--account", "acct_1Conn") == 0
    assert outbox_keys(db) == [
        "acct_1Conn/test/in_1Lost0002/invoice-paid",
        "platform/test/in_1Lost0001/invoice-paid",
    ]
    listings = stripe_api.requests("/v1/events")
    assert [r["stripe_account"] for r in listings] == [None, "acct_1Conn"]


def test_every_page_is_read(
    api_environ: dict[str, str], stripe_api: FakeStripeClient, db: DB,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Pages follow starting_after until has_more is false (page size made small)."""
    monkeypatch.setattr(stripe_client, "PAGE_SIZE", 2)
    for n in range(5):
        lost_event(stripe_api, n)
    assert backfill(api_environ) == 0
    assert len(outbox_keys(db)) == 5
    assert len(stripe_api.requests("/v1/events")) == 3


def test_without_an_api_key_it_says_so_in_one_line_and_exits_2(
    environ: dict[str, str], db: DB, capsys: pytest.CaptureFixture[str]
) -> None:
    """No STRIPE_API_KEY: one line naming it, exit 2, nothing stored."""
    assert backfill(environ) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("receipts: configuration error: STRIPE_API_KEY: is not set")
    assert "\n" not in err
    assert db.execute("SELECT count(*) AS n FROM stripe_events").fetchone() == {"n": 0}


def test_a_refused_key_exits_2_and_an_outage_exits_1_keeping_what_was_done(
    api_environ: dict[str, str], stripe_api: FakeStripeClient, db: DB,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """401: a configuration error (2). The API failing after the first page (past the
    library's retries): exit 1, the first page's receipts stay, the next run does the rest."""
    assert backfill({**api_environ, "STRIPE_API_KEY": "rk_test_revoked"}) == 2
    refused = capsys.readouterr()
    assert "401" in refused.err
    assert "0 found before the run stopped, the rest not read (run it again)" in refused.out
    monkeypatch.setattr(stripe_client, "PAGE_SIZE", 2)
    for n in range(4):
        lost_event(stripe_api, n)
    stripe_api.script(*[{"status": 500, "path": "/v1/events", "after": 1}] * 3)
    assert backfill(api_environ) == 1
    captured = capsys.readouterr()
    assert "stopped: Stripe API: HTTP 500" in captured.err
    assert "2 found before the run stopped, the rest not read (run it again): queued 2" in (
        captured.out
    )
    assert len(outbox_keys(db)) == 2
    assert backfill(api_environ) == 0
    assert len(outbox_keys(db)) == 4
