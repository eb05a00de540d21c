"""``/readyz`` proves that a write commits, and keeps that verdict a few seconds.

A server with its disk full still answers reads, so ``/readyz`` used to say
ready while every webhook failed. It now upserts the one row of
``readiness_probe`` and commits; a commit that fails (here a trigger raises
the error a full disk gives, SQLSTATE 53100) makes it answer 503 with a short
reason. The verdict is kept for a few seconds in the web process, by a clock
these tests move, so a load balancer polling every second does not write on
every poll, and a verdict of "not ready" passes as well.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from psycopg import sql

from receipts.config import Settings
from receipts.web import create_app
from receipts.web.readiness import VERDICT_SECONDS
from tests.helpers import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def ready_app(settings: Settings, clock: ManualClock) -> Iterator[Flask]:
    app = create_app(settings, clock=clock)
    yield app
    app.extensions["receipts"].database.close()


@pytest.fixture
def web(ready_app: Flask) -> FlaskClient:
    return ready_app.test_client()


def probe_version(db: Any) -> str | None:
    """The transaction that last wrote the probe row (a new one for every write), if any."""
    row = db.execute("SELECT xmin::text AS xmin FROM readiness_probe").fetchone()
    return None if row is None else str(row["xmin"])


def refuse_probe_writes(db: Any, sqlstate: str) -> None:
    """Make every write of the probe row fail with ``sqlstate``, as the server would."""
    db.execute(
        sql.SQL(
            """CREATE OR REPLACE FUNCTION refuse_probe_write() RETURNS trigger
               LANGUAGE plpgsql AS $$
               BEGIN
                   RAISE EXCEPTION 'could not extend file: No space left on device'
                       USING ERRCODE = {};
               END $$"""
        ).format(sql.Literal(sqlstate))
    )
    db.execute(
        """CREATE OR REPLACE TRIGGER refuse_probe_write BEFORE INSERT OR UPDATE
           ON readiness_probe FOR EACH ROW EXECUTE FUNCTION refuse_probe_write()"""
    )


def not_ready(reason: str) -> dict[str, str]:
    return {"status": "unavailable", "failing": "database", "reason": reason}


def test_a_full_disk_makes_readyz_503_until_a_write_commits_again(
    web: FlaskClient, clock: ManualClock, db: Any
) -> None:
    """Ready; then every write fails as on a full disk: once the verdict has passed,
    503 ``disk_full`` (never the driver's text). The disk freed, the "not ready"
    verdict still stands for its few seconds, then the next poll is ready again."""
    assert web.get("/readyz").status_code == 200
    refuse_probe_writes(db, "53100")
    assert web.get("/readyz").status_code == 200  # the verdict of a moment ago
    clock.advance(VERDICT_SECONDS)
    full = web.get("/readyz")
    assert (full.status_code, full.json) == (503, not_ready("disk_full"))
    db.execute("DROP TRIGGER refuse_probe_write ON readiness_probe")
    assert web.get("/readyz").json == not_ready("disk_full")
    clock.advance(VERDICT_SECONDS)
    assert web.get("/readyz").status_code == 200


def test_each_failed_commit_gives_its_short_reason(
    web: FlaskClient, clock: ManualClock, db: Any
) -> None:
    """Out of memory, any other lack of resources (SQLSTATE class 53), a read-only
    transaction and any other failed write: each says what, in one word."""
    for sqlstate, reason in [
        ("53200", "out_of_memory"),
        ("53000", "insufficient_resources"),
        ("25006", "read_only"),
        ("P0001", "write_failed"),
    ]:
        refuse_probe_writes(db, sqlstate)
        clock.advance(VERDICT_SECONDS)
        answer = web.get("/readyz")
        assert (answer.status_code, answer.json) == (503, not_ready(reason)), sqlstate


def test_polls_within_the_verdicts_seconds_cost_one_write(
    web: FlaskClient, clock: ManualClock, db: Any
) -> None:
    """Three polls within the verdict's seconds: one committed write of the one probe
    row. The first poll after it writes again, the same row."""
    assert probe_version(db) is None
    for _ in range(3):
        assert web.get("/readyz").status_code == 200
        clock.advance(VERDICT_SECONDS / 3 - 0.01)
    written = probe_version(db)
    assert written is not None
    clock.advance(1)
    assert web.get("/readyz").status_code == 200
    assert probe_version(db) not in (None, written)
    assert db.execute("SELECT count(*) AS n FROM readiness_probe").fetchone() == {"n": 1}
