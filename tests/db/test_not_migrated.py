"""A database the release phase has not migrated: every process says so, none fails.

The web process answers webhooks 503 (Stripe retries them once the schema is
there) and ``/readyz`` 503 ``not_migrated``; the cron worker stops with exit
3 naming ``receipts migrate``; the loop worker keeps waiting; a command says it
in one line. A database that lacks only the newest migration is not ready.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from flask import Flask

from receipts.cli import main
from receipts.config import load_settings
from receipts.delivery.providers.file_sink import FileSinkProvider
from receipts.delivery.worker import run_worker
from receipts.migrations import load_migrations, migrate
from receipts.web import create_app
from tests import stripe_events
from tests.stripe_events import TEST_SECRET, encode, sign


@pytest.fixture
def unmigrated(environ: dict[str, str], empty_database_url: str) -> dict[str, str]:
    return {**environ, "DATABASE_URL": empty_database_url}


@pytest.fixture
def web(unmigrated: dict[str, str]) -> Iterator[Flask]:
    app = create_app(load_settings(unmigrated))
    yield app
    app.extensions["receipts"].database.close()


def test_a_webhook_is_answered_503_so_stripe_sends_it_again(web: Flask) -> None:
    body = encode(stripe_events.event())
    answer = web.test_client().post(
        "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
    )
    assert answer.status_code == 503


def test_readyz_is_not_ready_and_says_why(web: Flask) -> None:
    answer = web.test_client().get("/readyz")
    assert answer.status_code == 503
    assert answer.get_json() == {
        "status": "unavailable",
        "failing": "database",
        "reason": "not_migrated",
    }


def test_readyz_waits_for_the_newest_migration(
    unmigrated: dict[str, str], empty_database_url: str
) -> None:
    migrate(empty_database_url)
    newest = max(load_migrations(), key=lambda migration: migration.version)
    forget = "DELETE FROM schema_migrations WHERE version = %s"
    record = "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)"
    app = create_app(load_settings(unmigrated))
    try:
        assert app.test_client().get("/readyz").status_code == 200
        with psycopg.connect(empty_database_url, autocommit=True) as conn:
            conn.execute(forget, [newest.version])
            assert app.test_client().get("/readyz").status_code == 503
            conn.execute(record, [newest.version, newest.name])
        assert app.test_client().get("/readyz").status_code == 200
    finally:
        app.extensions["receipts"].database.close()


def test_the_cron_worker_stops_with_exit_3_naming_migrate(
    unmigrated: dict[str, str], tmp_path: Any
) -> None:
    summary = run_worker(load_settings(unmigrated), FileSinkProvider(tmp_path / "mail"))
    assert summary.error is not None and summary.exit_code == 3
    assert "run `receipts migrate`" in summary.error


def test_a_command_says_it_in_one_line(unmigrated: dict[str, str], capsys: Any) -> None:
    assert main(["status"], unmigrated) == 3
    err = capsys.readouterr().err
    assert err.startswith("receipts: the database is not migrated (relation ")
    assert err.count("\n") == 1 and "run `receipts migrate`" in err
