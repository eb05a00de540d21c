"""Commits wait for the disk even where the database is set not to.

A database set to ``synchronous_commit = off`` (some managed offerings and
tuned servers are) answers COMMIT before the row is on disk: a webhook answered
200 just before a crash lost its row, and Stripe does not send it again. Every
connection the product opens sets it back on for its session
(``receipts/db.py``, ``durable_commits``). Each test sets the default off on its
own database only, and takes it back afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from receipts.db import Database, connect
from tests import stripe_events
from tests.stripe_events import TEST_SECRET, encode, sign


@pytest.fixture
def lazy_database(direct_database_url: str, db: psycopg.Connection[Any]) -> Iterator[str]:
    """The test's database with ``synchronous_commit = off`` as its default."""
    name = sql.Identifier(str(conninfo_to_dict(direct_database_url)["dbname"]))
    db.execute(sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(name))
    try:
        with psycopg.connect(direct_database_url) as plain:
            assert plain.execute("SHOW synchronous_commit").fetchone() == ("off",)
        yield direct_database_url
    finally:
        db.execute(sql.SQL("ALTER DATABASE {} RESET synchronous_commit").format(name))


def test_pooled_connections_commit_durably(lazy_database: str) -> None:
    database = Database(lazy_database, max_size=2)
    try:
        with database.transaction() as conn:
            assert conn.execute("SHOW synchronous_commit").fetchone() == {
                "synchronous_commit": "on"
            }
        with database.autocommit() as conn:
            assert conn.execute("SHOW synchronous_commit").fetchone() == {
                "synchronous_commit": "on"
            }
    finally:
        database.close()


@pytest.mark.parametrize("autocommit", [False, True])
def test_a_commands_connection_commits_durably_and_keeps_its_mode(
    lazy_database: str, autocommit: bool
) -> None:
    with connect(lazy_database, autocommit=autocommit) as conn:
        assert conn.autocommit is autocommit
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert conn.execute("SHOW synchronous_commit").fetchone() == {"synchronous_commit": "on"}


def test_a_webhook_row_is_committed_with_synchronous_commit_on(
    lazy_database: str, db: psycopg.Connection[Any], client: FlaskClient
) -> None:
    """What the ingest statement itself ran with, seen by a trigger on the event table."""
    db.execute("CREATE TABLE commit_settings (setting text NOT NULL)")
    db.execute(
        "CREATE FUNCTION note_commit_setting() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "INSERT INTO commit_settings VALUES (current_setting('synchronous_commit')); "
        "RETURN NEW; END $$"
    )
    db.execute(
        "CREATE TRIGGER note_commit_setting AFTER INSERT ON stripe_events "
        "FOR EACH ROW EXECUTE FUNCTION note_commit_setting()"
    )
    body = encode(stripe_events.event())
    response = client.post(
        "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
    )
    assert response.status_code == 200
    assert db.execute("SELECT setting FROM commit_settings").fetchall() == [{"setting": "on"}]
