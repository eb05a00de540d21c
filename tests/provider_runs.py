"""Worker runs against Postmark and SMTP: their settings and the outbox read back.

The fake Postmark API (tests/fake_postmark.py, whose search index lags behind)
and a real SMTP server (tests/smtp_server.py) are the ``postmark`` and ``smtp``
fixtures of tests/conftest.py. docs/architecture.md, "Providers and their
guarantees".
"""

from __future__ import annotations

import os
from typing import Any

import psycopg

from tests.fake_postmark import FakePostmarkClient
from tests.helpers import wait_for
from tests.smtp_server import SmtpServer
from tests.worker_runs import worker_command

Row = dict[str, Any]
Db = psycopg.Connection[Row]
POSTMARK_TOKEN = "postmark-fault-lab-token"
SEARCH_LAG = 0.3  # the worker's RECEIPTS_POSTMARK_SEARCH_LAG_SECONDS; the fake's index lags less


def _environ(database_url: str, **extra: str) -> dict[str, str]:
    """A worker's environment for a provider other than Resend (short timeouts)."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "DATABASE_URL": database_url,
        "RECEIPTS_PROVIDER_TIMEOUT": "2",
        "RECEIPTS_PROVIDER_CONNECT_TIMEOUT": "1",
        "RECEIPTS_RETRY_BASE_SECONDS": "0.2",
        "RECEIPTS_RETRY_MAX_SECONDS": "1",
        "RECEIPTS_DATABASE_TIMEOUT": "2",
        "RECEIPTS_SEND_RATE": "0",
        "LOG_FORMAT": "json",
        **extra,
    }


def postmark_environ(database_url: str, postmark: FakePostmarkClient) -> dict[str, str]:
    return _environ(
        database_url,
        RECEIPTS_PROVIDER="postmark",
        POSTMARK_SERVER_TOKEN=POSTMARK_TOKEN,
        POSTMARK_API_URL=postmark.url,
        RECEIPTS_POSTMARK_SEARCH_LAG_SECONDS=str(SEARCH_LAG),
    )


def smtp_environ(database_url: str, smtp: SmtpServer) -> dict[str, str]:
    return _environ(database_url, RECEIPTS_PROVIDER="smtp", SMTP_URL=smtp.url())


def drain(environment: dict[str, str]) -> str:
    """One ``receipts worker`` run that must end with exit code 0; its output."""
    code, out, err = worker_command(environment)
    assert code == 0, err
    return out


def outbox(db: Db) -> list[Row]:
    return db.execute(
        "SELECT message_key, status, review_reason, provider_id FROM email_outbox"
        " ORDER BY message_key"
    ).fetchall()


def last_attempt(db: Db) -> Row:
    row = db.execute(
        "SELECT outcome, provider_message, provider_id FROM email_attempts ORDER BY id DESC LIMIT 1"
    ).fetchone()
    assert row is not None
    return row


def attempt_started_before(db: Db, seconds: float) -> bool:
    """The latest attempt started at least ``seconds`` ago (by the database's clock)."""
    row = db.execute(
        "SELECT max(started_at) < now() - make_interval(secs => %s) AS old FROM email_attempts",
        (seconds,),
    ).fetchone()
    return bool(row and row["old"])


def wait_until_searchable(db: Db) -> None:
    wait_for(lambda: attempt_started_before(db, SEARCH_LAG), what="the search lag to pass")
