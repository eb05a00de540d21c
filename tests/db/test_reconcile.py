"""`receipts reconcile` against the fake Stripe API (a real HTTP server) and a real database:
every paid invoice has a receipt row, or it is listed; --apply queues it, once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from receipts.cli import main
from tests import stripe_events
from tests import stripe_objects as objects
from tests.fake_stripe_api import FakeStripeClient, running_fake_stripe_api
from tests.helpers import METRICS_AUTH
from tests.stripe_events import TEST_SECRET, encode, sign

Row = dict[str, Any]
DB = psycopg.Connection[Row]
API_KEY = "rk_test_reconcile"


@pytest.fixture
def stripe_api() -> Iterator[FakeStripeClient]:
    with running_fake_stripe_api(API_KEY) as fake:
        yield fake


@pytest.fixture
def api_environ(environ: dict[str, str], stripe_api: FakeStripeClient) -> dict[str, str]:
    return {**environ, "STRIPE_API_KEY": API_KEY, "STRIPE_API_BASE": stripe_api.url}


def paid(stripe_api: FakeStripeClient, n: int, account: str = "platform", **kw: Any) -> Row:
    invoice = objects.invoice(invoice_id=f"in_1Paid{n:04d}", created=int(time.time()) - 3600, **kw)
    stripe_api.add(account, invoices=[invoice], customers=[objects.customer()])
    return {k: v for k, v in invoice.items() if k != "_all_lines"}


def webhook(client: FlaskClient, invoice: Row, account: str | None = None) -> None:
    body = encode(stripe_events.event(invoice, account=account))
    response = client.post(
        "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
    )
    assert response.status_code == 200


def reconcile(environ: dict[str, str], *args: str) -> int:
    return main(["reconcile", "--since", "7d", *args], environ)


def runs(db: DB) -> list[Row]:
    return db.execute(
        "SELECT result, paid_invoices, missing, applied FROM reconcile_runs ORDER BY id"
    ).fetchall()


def test_finds_the_one_paid_invoice_without_a_row_and_apply_queues_it_once(
    api_environ: dict[str, str], stripe_api: FakeStripeClient, client: FlaskClient, db: DB,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Three paid invoices, two delivered by webhook: the third is listed (exit 1);
    --apply queues it under the webhook's key, recorded as from reconcile (exit 0);
    a second --apply finds nothing missing and adds nothing."""
    invoices = [paid(stripe_api, n) for n in range(3)]
    webhook(client, invoices[0])
    webhook(client, invoices[1])
    assert reconcile(api_environ) == 1
    out = capsys.readouterr().out
    missing = invoices[2]
    assert f"missing  in_1Paid0002  {missing['number']}  $19.99  paid 2025-11-30 00:00 UTC" in out
    assert "3 paid invoice(s), 1 without a receipt row (run with --apply" in out
    assert db.execute("SELECT count(*) AS n FROM email_outbox").fetchone() == {"n": 2}

    assert reconcile(api_environ, "--apply") == 0
    out = capsys.readouterr().out
    key = "platform/test/in_1Paid0002/invoice-paid"
    assert f"queued  {key}" in out
    row = db.execute("SELECT status, source_event_id FROM email_outbox WHERE message_key = %s",
                     (key,)).fetchone()  # fmt: skip
    assert row == {"status": "pending", "source_event_id": "reconcile:in_1Paid0002"}
    recorded = db.execute("SELECT source, outcome FROM stripe_events WHERE event_id = %s",
                          ("reconcile:in_1Paid0002",)).fetchone()  # fmt: skip
    assert recorded == {"source": "reconcile", "outcome": "queued"}

    assert reconcile(api_environ, "--apply") == 0
    assert "3 paid invoice(s), 0 without a receipt row, 0 ingested" in capsys.readouterr().out
    assert db.execute("SELECT count(*) AS n FROM email_outbox").fetchone() == {"n": 3}
    assert runs(db) == [
        {"result": "missing", "paid_invoices": 3, "missing": 1, "applied": 0},
        {"result": "applied", "paid_invoices": 3, "missing": 1, "applied": 1},
        {"result": "clean", "paid_invoices": 3, "missing": 0, "applied": 0},
    ]


def test_the_applied_receipt_matches_its_late_webhook(
    api_environ: dict[str, str], stripe_api: FakeStripeClient, client: FlaskClient, db: DB
) -> None:
    """Same key, same fingerprint: the webhook arriving after --apply is a duplicate."""
    invoice = paid(stripe_api, 7)
    assert reconcile(api_environ, "--apply") == 0
    webhook(client, invoice)
    outcomes = [r["outcome"] for r in db.execute("SELECT outcome FROM stripe_events ORDER BY 1")]
    assert outcomes == ["duplicate", "queued"]


def test_zero_value_invoices_and_review_rows_are_not_missing(
    api_environ: dict[str, str], stripe_api: FakeStripeClient, client: FlaskClient, db: DB
) -> None:
    """A zero-value invoice needs no receipt; one whose receipt waits in review has a row."""
    paid(stripe_api, 1, amount=0)
    in_review = paid(stripe_api, 2, email=None)
    stripe_api.add(customers=[objects.customer(email=None)])
    webhook(client, in_review | {"customer_email": None})
    assert reconcile(api_environ) == 0
    assert runs(db)[-1]["result"] == "clean"


def test_connect_accounts_are_reconciled_under_their_keys(
    api_environ: dict[str, str], stripe_api: FakeStripeClient, client: FlaskClient, db: DB
) -> None:
    """--account acct_…: its invoices are listed with Stripe-Account and keyed by it."""
    invoice = paid(stripe_api, 3, "acct_1Conn")
    webhook(client, invoice, account="acct_1Conn")
    paid(stripe_api, 4, "acct_1Conn")
    assert reconcile(api_environ, "--account", "acct_1Conn", "--apply") == 0
    keys = [r["message_key"] for r in db.execute("SELECT message_key FROM email_outbox ORDER BY 1")]
    assert keys == ["acct_1Conn/test/in_1Paid0003/invoice-paid",
                    "acct_1Conn/test/in_1Paid0004/invoice-paid"]  # fmt: skip
    listed = [r["stripe_account"] for r in stripe_api.requests("/v1/invoices") if r["query"]]
    assert listed == [None, "acct_1Conn"]


def test_status_and_metrics_learn_the_last_result(
    api_environ: dict[str, str], stripe_api: FakeStripeClient, client: FlaskClient,
    environ: dict[str, str], capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Missing receipts make `receipts status` ask for a person and show in /metrics;
    after --apply the status is clean again."""
    paid(stripe_api, 5)
    assert reconcile(api_environ) == 1
    capsys.readouterr()
    assert main(["status"], environ) == 1
    out = capsys.readouterr().out
    assert "reconcile       missing" in out and "1 missing" in out
    assert "NEEDS A PERSON: the last reconcile found 1 paid invoice(s) without a receipt" in out
    metrics = client.get("/metrics", headers=METRICS_AUTH).get_data(as_text=True)
    assert "receipts_reconcile_missing_invoices 1.0" in metrics
    assert 'receipts_reconcile_last_result{result="missing"} 1.0' in metrics
    assert reconcile(api_environ, "--apply") == 0
    capsys.readouterr()
    main(["status"], environ)
    assert "reconcile       applied" in capsys.readouterr().out
    assert "receipts_reconcile_missing_invoices 0.0" in client.get(
        "/metrics", headers=METRICS_AUTH
    ).get_data(as_text=True)


def test_without_an_api_key_it_says_so_and_exits_2(
    environ: dict[str, str], db: DB, capsys: pytest.CaptureFixture[str]
) -> None:
    """No STRIPE_API_KEY: one line naming it, exit 2, no run recorded."""
    assert reconcile(environ) == 2
    assert capsys.readouterr().err.startswith("receipts: configuration error: STRIPE_API_KEY")
    assert runs(db) == []


def test_an_api_outage_is_recorded_as_a_failed_run(
    api_environ: dict[str, str], stripe_api: FakeStripeClient, db: DB,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The API stays down (past the library's retries): exit 1 and a failed run on record."""
    stripe_api.script(*[{"status": 500, "path": "/v1/invoices"}] * 3)
    assert reconcile(api_environ) == 1
    assert "stopped: Stripe API: HTTP 500" in capsys.readouterr().err
    [run] = db.execute("SELECT result, error FROM reconcile_runs").fetchall()
    assert run["result"] == "failed" and "500" in run["error"]
