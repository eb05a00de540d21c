"""The words in receipts.vocabulary are the words the database accepts.

Each enum is compared with the CHECK constraint of its column as PostgreSQL
stores it after every migration (``pg_constraint``), so adding a state in one
place and not the other fails here. See docs/architecture.md, "The vocabulary".
"""

from __future__ import annotations

import re
import shutil
import uuid
from enum import StrEnum
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import TupleRow

from receipts import migrations
from receipts.migrations import load_migrations, migrate
from receipts.vocabulary import (
    AttemptOutcome,
    DeliveryEventOutcome,
    DeliveryStatus,
    IngestOutcome,
    PauseReason,
    RowStatus,
)

_QUOTED_VALUE = re.compile(r"'((?:[^']|'')*)'::text")
# What the worker wrote before migration 006 added rate_limited and quota_exceeded.
OUTCOMES_BEFORE_006 = ["sent", "retry", "review", "lease_lost", "config_error", "released",
                       "skipped_cutoff", "skipped_budget"]  # fmt: skip


def allowed_values(database_url: str, table: str, column: str) -> set[str]:
    """The values the one CHECK constraint on ``table.column`` alone lists.

    Constraints that also name other columns (``review_has_reason``…) say how
    states relate, not which states exist, and are left out.
    """
    with psycopg.connect(database_url) as conn:
        definitions = [
            row[0]
            for row in conn.execute(
                """SELECT pg_get_constraintdef(c.oid)
                     FROM pg_constraint c
                     JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attname = %s
                    WHERE c.conrelid = %s::regclass AND c.contype = 'c'
                      AND c.conkey = ARRAY[a.attnum]""",
                (column, table),
            )
        ]
    assert len(definitions) == 1, definitions
    return {value.replace("''", "'") for value in _QUOTED_VALUE.findall(definitions[0])}


@pytest.mark.parametrize(
    ("table", "column", "vocabulary"),
    [
        ("email_outbox", "status", RowStatus),
        ("stripe_events", "outcome", IngestOutcome),
        ("email_attempts", "outcome", AttemptOutcome),
        ("email_outbox", "delivery_status", DeliveryStatus),
        ("resend_events", "outcome", DeliveryEventOutcome),
        ("sending_pauses", "reason", PauseReason),
    ],
)
def test_check_constraints_list_exactly_the_vocabulary(
    database_url: str, table: str, column: str, vocabulary: type[StrEnum]
) -> None:
    """Each status/outcome column's CHECK accepts exactly its enum's values."""
    assert allowed_values(database_url, table, column) == {member.value for member in vocabulary}


def test_every_delivery_status_has_its_own_rank() -> None:
    """No two delivery statuses share a rank, so "more final" always decides."""
    ranks = [status.rank for status in DeliveryStatus]
    assert len(set(ranks)) == len(ranks) == len(DeliveryStatus)


def _insert_attempt(conn: psycopg.Connection[TupleRow], outcome: str | None) -> None:
    conn.execute(
        """INSERT INTO email_attempts (message_key, attempt, worker_id, lease_token, outcome)
           VALUES ('platform/test/in_1/invoice-paid', 1, 'w', %s, %s)""",
        (uuid.uuid4(), outcome),
    )


def _insert_outbox_row(conn: psycopg.Connection[TupleRow]) -> None:
    conn.execute(
        """INSERT INTO email_outbox (message_key, purpose, account, livemode, invoice_id,
                                     source_event_id, fingerprint, status, provider_id)
           VALUES ('platform/test/in_1/invoice-paid', 'invoice-paid', 'platform', false,
                   'in_1', 'evt_1', 'sha256:x', 'sent', 're_1')"""
    )


def test_attempt_outcome_accepts_null_and_refuses_unknown_words(database_url: str) -> None:
    """NULL (in flight, or the worker died) is allowed; a word outside the enum is not."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        _insert_outbox_row(conn)
        _insert_attempt(conn, None)
        for outcome in AttemptOutcome:
            _insert_attempt(conn, outcome)
        with pytest.raises(psycopg.errors.CheckViolation):
            _insert_attempt(conn, "timeout")


def _migrations_up_to(version: int, directory: Path) -> Path:
    """A copy of sql/ holding only the migrations numbered up to ``version``."""
    directory.mkdir()
    for migration in load_migrations():
        if migration.version <= version:
            source = migrations.migrations_dir() / f"{migration.name}.sql"
            shutil.copy(source, directory / source.name)
    return directory


def test_the_outcome_check_applies_over_existing_attempts(
    empty_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database at migration 3 holding every outcome the worker wrote then upgrades cleanly."""
    earlier = _migrations_up_to(3, tmp_path / "sql")
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "migrations_dir", lambda: earlier)
        migrate(empty_database_url)
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        _insert_outbox_row(conn)
        _insert_attempt(conn, None)
        for outcome in OUTCOMES_BEFORE_006:
            _insert_attempt(conn, outcome)
    assert migrate(empty_database_url)[0] == "004_attempt_outcome_check"
    allowed = allowed_values(empty_database_url, "email_attempts", "outcome")
    assert allowed == {outcome.value for outcome in AttemptOutcome}


def test_the_provider_contract_migration_applies_over_every_word_written_before_it(
    empty_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database at migration 6 holding every attempt outcome, delivery status and
    delivery event outcome written before 007 upgrades cleanly, and then accepts
    the new words (rate_limited, quota_exceeded, failed, suppressed, evidence)."""
    earlier = _migrations_up_to(6, tmp_path / "sql")
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "migrations_dir", lambda: earlier)
        migrate(empty_database_url)
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        _insert_outbox_row(conn)
        for outcome in [None, *OUTCOMES_BEFORE_006]:
            _insert_attempt(conn, outcome)
        for status in ("delayed", "delivered", "bounced", "complained"):
            conn.execute("UPDATE email_outbox SET delivery_status = %s", (status,))
        for n, outcome in enumerate(("applied", "stale", "unknown_email", "ignored")):
            conn.execute(
                "INSERT INTO resend_events (svix_id, event_type, outcome) VALUES (%s, 'x', %s)",
                (f"msg_{n}", outcome),
            )
    assert migrate(empty_database_url)[0] == "007_provider_contract"
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        _insert_attempt(conn, "rate_limited")
        _insert_attempt(conn, "quota_exceeded")
        conn.execute("UPDATE email_outbox SET delivery_status = 'suppressed'")
        conn.execute("INSERT INTO resend_events (svix_id, event_type, outcome) "
                     "VALUES ('msg_new', 'email.sent', 'evidence')")  # fmt: skip
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("UPDATE email_outbox SET delivery_status = 'lost'")


def test_an_unknown_outcome_stops_the_release_and_changes_nothing(
    empty_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hand-written outcome outside the enum fails migrate; the database stays at 3."""
    earlier = _migrations_up_to(3, tmp_path / "sql")
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "migrations_dir", lambda: earlier)
        migrate(empty_database_url)
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        _insert_outbox_row(conn)
        _insert_attempt(conn, "timeout")
    with pytest.raises(psycopg.errors.CheckViolation):
        migrate(empty_database_url)
    with psycopg.connect(empty_database_url) as conn:
        versions = [row[0] for row in conn.execute("SELECT version FROM schema_migrations")]
    assert sorted(versions) == [1, 2, 3]
