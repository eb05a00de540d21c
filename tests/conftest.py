"""Shared fixtures: a real PostgreSQL, a fresh migrated database per test.

The server is ``DATABASE_URL`` when it is set (CI's at 127.0.0.1:5432), or
else an embedded server started once per session. A template database is
migrated once; every test gets ``CREATE DATABASE … TEMPLATE`` of it, so code
under test may commit freely and tests never share rows.

With ``RECEIPTS_TEST_THROUGH_PGBOUNCER=1`` the code under test reaches each
test database through a real PgBouncer in transaction pooling mode
(``tests/pgbouncer.py``): ``database_url`` is the pooled URL, ``environ`` and
``pooling`` carry ``RECEIPTS_DATABASE_POOLING=transaction`` and the direct URL
as ``DATABASE_DIRECT_URL``, and ``db`` (the tests' own observer) stays direct.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient

from receipts.config import Settings, load_settings
from receipts.dev.embedded import EmbeddedUnavailable, default_data_dir, start_server, with_database
from receipts.migrations import migrate
from receipts.web import create_app
from tests import pgbouncer as pgbouncer_process
from tests.stripe_events import TEST_SECRET

_database_numbers = itertools.count(1)
THROUGH_PGBOUNCER = os.environ.get("RECEIPTS_TEST_THROUGH_PGBOUNCER") == "1"


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """An admin URL for a real PostgreSQL server."""
    configured = os.environ.get("DATABASE_URL")
    if configured:
        yield configured
        return
    try:
        server = start_server(default_data_dir(f"test-{os.getpid()}"), delete_on_exit=True)
    except EmbeddedUnavailable as exc:
        pytest.skip(f"no PostgreSQL: {exc}")
    yield server.get_uri("postgres")
    server.cleanup()


def _admin(server_url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(with_database(server_url, "postgres"), autocommit=True)


@pytest.fixture(scope="session")
def template_database(server_url: str) -> Iterator[str]:
    name = f"receipts_tpl_{os.getpid()}"
    with _admin(server_url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    migrate(with_database(server_url, name))
    yield name
    with _admin(server_url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pgbouncer(server_url: str) -> Iterator[pgbouncer_process.PgBouncer]:
    """A real PgBouncer in transaction mode in front of the test server."""
    if pgbouncer_process.binary() is None:
        reason = "pgbouncer is not installed (apt-get install pgbouncer); PgBouncer runs skipped"
        if THROUGH_PGBOUNCER:
            pytest.fail(f"RECEIPTS_TEST_THROUGH_PGBOUNCER=1 but {reason}")
        pytest.skip(reason)
    with pgbouncer_process.running_pgbouncer(server_url) as running:
        yield running


@pytest.fixture
def direct_database_url(server_url: str, template_database: str) -> Iterator[str]:
    """A fresh, migrated database of its own for one test, reached directly."""
    name = f"receipts_t_{os.getpid()}_{next(_database_numbers)}"
    with _admin(server_url) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"')
    yield with_database(server_url, name)
    with _admin(server_url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def database_url(direct_database_url: str, request: pytest.FixtureRequest) -> str:
    """The test's database as the code under test reaches it (through PgBouncer in
    the PgBouncer runs)."""
    if THROUGH_PGBOUNCER:
        bouncer: pgbouncer_process.PgBouncer = request.getfixturevalue("pgbouncer")
        return bouncer.url_for(direct_database_url)
    return direct_database_url


@pytest.fixture
def pooling(database_url: str, direct_database_url: str) -> dict[str, str]:
    """The settings a process behind a transaction pooler needs (none when direct)."""
    if database_url == direct_database_url:
        return {}
    return {"RECEIPTS_DATABASE_POOLING": "transaction", "DATABASE_DIRECT_URL": direct_database_url}


@pytest.fixture
def empty_database_url(server_url: str) -> Iterator[str]:
    """A database with no tables at all, for migration tests."""
    name = f"receipts_e_{os.getpid()}_{next(_database_numbers)}"
    with _admin(server_url) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield with_database(server_url, name)
    with _admin(server_url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def environ(database_url: str, pooling: dict[str, str]) -> dict[str, str]:
    """The environment a deployed web process would have."""
    return {
        "DATABASE_URL": database_url,
        "STRIPE_WEBHOOK_SECRET": TEST_SECRET,
        "EMAIL_FROM": "Billing <billing@example.com>",
        **pooling,
    }


@pytest.fixture
def settings(environ: dict[str, str]) -> Settings:
    return load_settings(environ)


@pytest.fixture
def app(settings: Settings) -> Iterator[Flask]:
    app = create_app(settings)
    yield app
    app.extensions["receipts"].database.close()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def db(direct_database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain autocommit connection for assertions, never through a pooler."""
    from psycopg.rows import dict_row

    with psycopg.connect(direct_database_url, autocommit=True, row_factory=dict_row) as conn:
        yield conn
