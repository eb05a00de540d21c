"""``receipts replay`` against the real web app over HTTP and a real database.

The app verifies signatures with its own code, so an accepted replay proves
the command signs exactly as Stripe does.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask
from werkzeug.serving import make_server

from receipts.cli import main
from receipts.config import load_settings
from receipts.dev.state import ensure_dev_secret
from receipts.web import create_app
from tests.stripe_events import TEST_SECRET

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
Row = dict[str, Any]


@pytest.fixture
def webhook_url(app: Flask) -> Iterator[str]:
    """The app served over real HTTP on a free port."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/webhooks/stripe"
    server.shutdown()
    thread.join()


def outbox(db: psycopg.Connection[Row]) -> list[Row]:
    return db.execute("SELECT * FROM email_outbox ORDER BY created_at").fetchall()


def deliveries(db: psycopg.Connection[Row]) -> dict[str, int]:
    rows = db.execute("SELECT event_id, deliveries FROM stripe_events").fetchall()
    return {row["event_id"]: row["deliveries"] for row in rows}


def replay(url: str, *args: str, secret: str = TEST_SECRET) -> int:
    return main(["replay", *args, "--url", url], environ={"STRIPE_WEBHOOK_SECRET": secret})


def test_example_event_is_accepted_and_queued(webhook_url: str, db: Any, capsys: Any) -> None:
    """A replayed example passes the app's signature check and becomes one pending row."""
    assert replay(webhook_url, str(EXAMPLES / "invoice_paid.json")) == 0
    [row] = outbox(db)
    assert row["message_key"] == "platform/test/in_1QExamplePaid00000001/invoice-paid"
    assert row["status"] == "pending"
    out = capsys.readouterr().out
    assert "evt_1QExamplePaid0000000001 (invoice.paid)" in out
    assert "1 x 200 queued platform/test/in_1QExamplePaid00000001/invoice-paid" in out


def test_times_and_concurrent_storm_makes_one_row(webhook_url: str, db: Any, capsys: Any) -> None:
    """--times 20 --concurrent 10: twenty deliveries counted, still one outbox row; the
    first queued it, the other nineteen are printed as duplicates."""
    path = str(EXAMPLES / "invoice_paid.json")
    assert replay(webhook_url, path, "--times", "20", "--concurrent", "10") == 0
    assert len(outbox(db)) == 1
    assert deliveries(db) == {"evt_1QExamplePaid0000000001": 20}
    out = capsys.readouterr().out
    assert "1 x 200 queued" in out and "19 x 200 duplicate" in out


def test_connect_and_zero_value_examples(webhook_url: str, db: Any) -> None:
    """The Connect example is keyed by its account; the zero-value one is recorded, not sent."""
    assert replay(webhook_url, str(EXAMPLES / "invoice_paid_connect.json")) == 0
    assert replay(webhook_url, str(EXAMPLES / "invoice_paid_zero_value.json")) == 0
    [row] = outbox(db)
    assert row["message_key"] == "acct_1QExampleShop01/test/in_1QExampleConnect0001/invoice-paid"
    outcome = db.execute(
        "SELECT outcome FROM stripe_events WHERE event_id = 'evt_1QExampleZeroValue000001'"
    ).fetchone()
    assert outcome == {"outcome": "ignored"}


def test_without_a_configured_secret_the_dev_secret_is_used(
    database_url: str, db: Any, tmp_path: Path
) -> None:
    """With STRIPE_WEBHOOK_SECRET unset, replay signs with the secret `receipts dev` keeps."""
    dev_secret, created = ensure_dev_secret(tmp_path)
    assert created and dev_secret.startswith("whsec_")
    app = create_app(
        load_settings(
            {
                "DATABASE_URL": database_url,
                "STRIPE_WEBHOOK_SECRET": dev_secret,
                "EMAIL_FROM": "billing@example.com",
            }
        )
    )
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/webhooks/stripe"
        code = main(
            ["replay", str(EXAMPLES / "invoice_paid.json"), "--url", url],
            environ={"RECEIPTS_DEV_DIR": str(tmp_path)},
        )
    finally:
        server.shutdown()
        app.extensions["receipts"].database.close()
    assert code == 0
    assert len(outbox(db)) == 1


def test_wrong_secret_is_rejected_and_exit_code_says_so(
    webhook_url: str, db: Any, capsys: Any
) -> None:
    """A delivery the app refuses (400) makes replay exit 1 and stores nothing."""
    path = str(EXAMPLES / "invoice_paid.json")
    assert replay(webhook_url, path, "--times", "2", secret="whsec_not_the_right_one") == 1
    assert outbox(db) == [] and deliveries(db) == {}
    assert "2 x 400" in capsys.readouterr().out


def test_event_from_stdin(webhook_url: str, db: Any, monkeypatch: Any) -> None:
    """`-` reads the event from standard input."""
    body = (EXAMPLES / "invoice_paid_connect.json").read_bytes()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(body)))
    assert replay(webhook_url, "-") == 0
    assert len(outbox(db)) == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        (b"{not json", "is not JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (json.dumps({"id": "evt_1", "type": "invoice.paid"}).encode(), "no 'data.object'"),
        (json.dumps({"type": "invoice.paid", "data": {"object": {}}}).encode(), "no 'id'"),
    ],
)
def test_bad_input_is_named_and_nothing_is_sent(
    webhook_url: str,
    db: Any,
    tmp_path: Path,
    capsys: Any,
    content: bytes | None,
    message: str,
) -> None:
    """A missing file, bad JSON or a non-event exits 2 with a message; no request is made."""
    path = tmp_path / "event.json"
    if content is not None:
        path.write_bytes(content)
    assert replay(webhook_url, str(path)) == 2
    assert message in capsys.readouterr().err
    assert deliveries(db) == {}
