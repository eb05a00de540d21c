"""The suite's own promise (tests/databases.py): every test gets a migrated
database that no other test's rows, sessions or schema changes reach."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.databases import DatabasePool
from tests.outbox_states import insert_row


@pytest.fixture(scope="module")
def pool(server_url: str) -> Iterator[DatabasePool]:
    """A pool of these tests' own, so they see every database it hands out."""
    pool = DatabasePool(server_url)
    yield pool
    pool.close()


def connect(url: str) -> psycopg.Connection[dict[str, Any]]:
    return psycopg.connect(url, autocommit=True, row_factory=dict_row)


def count(url: str, table: str) -> int:
    with connect(url) as conn:
        row = conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone()
        assert row is not None
        return int(row["n"])


def database_oid(conn: psycopg.Connection[dict[str, Any]]) -> int:
    """Survives a rename; a new clone has another."""
    row = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()
    assert row is not None
    return int(row["oid"])


def next_action_id(conn: psycopg.Connection[dict[str, Any]]) -> int:
    row = conn.execute(
        """INSERT INTO operator_actions (message_key, action, performed_by, reason)
           VALUES ('k', 'note', 'test', 'test') RETURNING id"""
    ).fetchone()
    assert row is not None
    return int(row["id"])


def test_the_next_test_gets_no_rows_restarted_ids_and_another_name(pool: DatabasePool) -> None:
    """Rows committed by one test are gone for the next, ids start again, the
    migrations are still recorded, and the URL is not the one handed out before."""
    with pool.migrated() as first, connect(first) as conn:
        insert_row(conn, "in_1Left")
        assert next_action_id(conn) == 1
        assert next_action_id(conn) == 2
    with pool.migrated() as second, connect(second) as conn:
        assert second != first
        assert count(second, "email_outbox") == 0 and count(second, "operator_actions") == 0
        assert next_action_id(conn) == 1
        assert count(second, "schema_migrations") > 0


def test_a_session_left_open_cannot_reach_the_next_test(pool: DatabasePool) -> None:
    """A connection the test never closed is ended, and its URL leads nowhere now."""
    with pool.migrated() as first:
        left_open = connect(first)
        insert_row(left_open, "in_1Open")
    try:
        with pool.migrated() as second:
            assert count(second, "email_outbox") == 0
            with pytest.raises(psycopg.OperationalError):
                left_open.execute("SELECT 1")
            with pytest.raises(psycopg.OperationalError):
                connect(first).close()
    finally:
        left_open.close()


@pytest.mark.parametrize(
    "change",
    [
        "ALTER TABLE email_outbox ADD COLUMN left_behind text",
        "CREATE TABLE left_behind (id int)",
        "CREATE INDEX left_behind ON operator_actions (reason)",
        "GRANT SELECT ON email_outbox TO PUBLIC",
        "CREATE FUNCTION left_behind() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "DELETE FROM schema_migrations",
    ],
    ids=["column", "table", "index", "grant", "function", "migration-history"],
)
def test_a_database_whose_schema_changed_is_not_handed_out_again(
    pool: DatabasePool, change: str
) -> None:
    """After a test changed more than rows, the next test gets a fresh clone of
    the template, without the change."""
    with pool.migrated() as first, connect(first) as conn:
        conn.execute(change)
        changed_database = database_oid(conn)
    with pool.migrated() as second, connect(second) as conn:
        assert database_oid(conn) != changed_database
        changed = conn.execute(
            """SELECT (SELECT count(*) FROM information_schema.columns
                        WHERE column_name = 'left_behind')
                    + (SELECT count(*) FROM pg_class WHERE relname = 'left_behind')
                    + (SELECT count(*) FROM pg_proc WHERE proname = 'left_behind')
                    + (SELECT count(*) FROM information_schema.role_table_grants
                        WHERE grantee = 'PUBLIC' AND table_name = 'email_outbox') AS n"""
        ).fetchone()
        assert changed == {"n": 0}
        assert count(second, "schema_migrations") > 0


def test_temporary_tables_are_not_a_schema_change(pool: DatabasePool) -> None:
    """A session's temporary table (the import command uses one) leaves the
    database clean: it is emptied and handed out again, not cloned anew."""
    with pool.migrated() as first, connect(first) as conn:
        conn.execute("CREATE TEMPORARY TABLE scratch (line text)")
        insert_row(conn, "in_1Temp")
        used_database = database_oid(conn)
    with pool.migrated() as second, connect(second) as conn:
        assert count(second, "email_outbox") == 0
        assert database_oid(conn) == used_database
