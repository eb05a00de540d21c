"""Migrations: applied once, in order, safe to run concurrently."""

from __future__ import annotations

import threading

import psycopg

from receipts.migrations import load_migrations, migrate


def test_all_migrations_apply_to_an_empty_database(empty_database_url: str) -> None:
    """Every file in sql/ applies cleanly to a database with nothing in it."""
    applied = migrate(empty_database_url)
    assert applied == [m.name for m in load_migrations()]
    with psycopg.connect(empty_database_url) as conn:
        tables = {
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            )
        }
    assert {"email_outbox", "stripe_events", "email_attempts", "schema_migrations"} <= tables


def test_running_migrate_twice_is_a_no_op(empty_database_url: str) -> None:
    """The second run finds every migration recorded and applies nothing."""
    migrate(empty_database_url)
    assert migrate(empty_database_url) == []


def test_concurrent_migrations_apply_each_file_once(empty_database_url: str) -> None:
    """Two release processes started together: the advisory lock serialises them."""
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(migrate(empty_database_url))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sorted(len(r) for r in results) == [0, 0, 0, len(load_migrations())]
