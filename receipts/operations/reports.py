"""What an operator reads: the health summary (``receipts status``, ``/metrics``)
and the incident timeline of one receipt (``receipts show``).

Everything here only reads. Email bodies and invoice URLs never leave this
module unless the caller asks for the payload explicitly.

Attempt rows (``email_attempts``) are read with the worker's meaning: an
attempt with ``outcome`` and ``finished_at`` still NULL is in flight while its
lease holds, and *abandoned* once it has expired (the worker died mid-attempt:
the provider may have accepted the email). An attempt that finished without an
HTTP status (timeout, connection error) is just as uncertain.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from receipts.config import PROVIDER_KEY_RETENTION_HOURS
from receipts.db import Connection, connect
from receipts.ingest.receipt import resend_tag_value

STATUSES = ("pending", "processing", "sent", "review")
# The summary queries are short index scans whose row estimates can be far too
# high on big tables; compiling them with JIT then costs more than running them.
NO_JIT = "SET LOCAL jit = off"
DISMISSED = "dismissed"  # review_reason of a review row a person closed without sending

# Attempt outcomes the worker writes when it made no request (see receipts.delivery.worker).
NOT_SENT_OUTCOMES = frozenset({"released", "skipped_cutoff", "skipped_budget"})
# Attempts that were a real request to the provider, for latency and answer classes.
_CALLED_PROVIDER = "(http_status IS NOT NULL OR outcome = 'retry')"

# Row columns `show` prints; `payload` only on request.
_ROW_COLUMNS = (
    "message_key, purpose, account, livemode, invoice_id, source_event_id, status, "
    "review_reason, attempts, available_at, created_at, updated_at, first_attempt_at, "
    "locked_until, lease_token, provider_id, sent_at, last_error, delivery_status, "
    "delivery_status_at, payload -> 'to' AS recipients"
)


@contextmanager
def read_only_snapshot(database_url: str) -> Iterator[Connection]:
    """One consistent, read-only view of every table, for a report."""
    with connect(database_url) as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        conn.execute(NO_JIT)
        yield conn


@dataclass(frozen=True, kw_only=True)
class Status:
    """One snapshot of the outbox, as ``receipts status`` and ``/metrics`` report it."""

    counts: dict[str, int]
    oldest_pending_age_seconds: float | None
    closest_to_cutoff_key: str | None
    retry_cutoff_remaining_seconds: float | None
    review_by_reason: dict[str, int]
    dismissed: int
    lease_recoveries_24h: int
    abandoned_attempts: int
    conflicts_24h: int
    unknown_delivery_events_24h: int
    delivery_problems_24h: list[dict[str, Any]]  # bounced/complained receipts, newest first
    sent_last_hour: int
    sent_last_day: int

    @property
    def open_review(self) -> int:
        """Review rows that still need a person (dismissed ones do not)."""
        return sum(self.review_by_reason.values())

    def as_dict(self) -> dict[str, Any]:
        document = asdict(self)
        document["open_review"] = self.open_review
        return document


def read_status(conn: Connection, *, retry_cutoff_hours: float) -> Status:
    """Read the whole summary in one transaction (one consistent snapshot)."""
    counts = dict.fromkeys(STATUSES, 0)
    for row in conn.execute("SELECT status, count(*) AS n FROM email_outbox GROUP BY status"):
        counts[row["status"]] = row["n"]
    reasons = {
        row["review_reason"]: row["n"]
        for row in conn.execute(
            """SELECT review_reason, count(*) AS n FROM email_outbox
               WHERE status = 'review' GROUP BY review_reason ORDER BY review_reason"""
        )
    }
    dismissed = reasons.pop(DISMISSED, 0)
    ages = _one(
        conn,
        """SELECT extract(epoch FROM now() - min(available_at))::float8 AS oldest_pending
           FROM email_outbox WHERE status = 'pending' AND available_at <= now()""",
    )
    cutoff = _one(
        conn,
        # One branch per status so each reads only its partial index.
        """SELECT message_key,
                  extract(epoch FROM first_attempt_at + make_interval(secs => %s) - now())::float8
                      AS remaining
           FROM ((SELECT message_key, first_attempt_at FROM email_outbox
                   WHERE status = 'pending' AND first_attempt_at IS NOT NULL
                   ORDER BY first_attempt_at LIMIT 1)
                 UNION ALL
                 (SELECT message_key, first_attempt_at FROM email_outbox
                   WHERE status = 'processing' AND first_attempt_at IS NOT NULL
                   ORDER BY first_attempt_at LIMIT 1)) AS retried
           ORDER BY first_attempt_at LIMIT 1""",
        (retry_cutoff_hours * 3600,),
    )
    recent = _one(conn, _RECENT_ACTIVITY_SQL)
    problems = conn.execute(
        """SELECT DISTINCT ON (e.message_key) e.message_key, o.delivery_status,
                  o.delivery_status_at
           FROM resend_events e JOIN email_outbox o USING (message_key)
           WHERE e.received_at > now() - interval '24 hours' AND e.outcome = 'applied'
             AND o.delivery_status IN ('bounced', 'complained')
           ORDER BY e.message_key""",
    ).fetchall()
    return Status(
        counts=counts,
        oldest_pending_age_seconds=ages["oldest_pending"] if ages else None,
        closest_to_cutoff_key=cutoff["message_key"] if cutoff else None,
        retry_cutoff_remaining_seconds=cutoff["remaining"] if cutoff else None,
        review_by_reason=reasons,
        dismissed=dismissed,
        lease_recoveries_24h=recent["lease_recoveries"] if recent else 0,
        abandoned_attempts=recent["abandoned"] if recent else 0,
        conflicts_24h=recent["conflicts"] if recent else 0,
        unknown_delivery_events_24h=recent["unknown_deliveries"] if recent else 0,
        delivery_problems_24h=sorted(
            problems, key=lambda found: found["delivery_status_at"], reverse=True
        ),
        sent_last_hour=recent["sent_hour"] if recent else 0,
        sent_last_day=recent["sent_day"] if recent else 0,
    )


# A recovery is an attempt whose previous attempt on the same row never
# finished: its worker died and another claimed the row after the lease.
# An abandoned attempt never finished and nobody has claimed its row since.
_RECENT_ACTIVITY_SQL = """
SELECT
  (SELECT count(*) FROM email_attempts a
    WHERE a.outcome IS NULL AND a.finished_at IS NULL
      AND a.started_at > now() - interval '48 hours'
      AND (SELECT b.started_at FROM email_attempts b
            WHERE b.message_key = a.message_key AND b.id > a.id
            ORDER BY b.id LIMIT 1) > now() - interval '24 hours') AS lease_recoveries,
  (SELECT count(*) FROM email_attempts a JOIN email_outbox o USING (message_key)
    WHERE a.outcome IS NULL AND a.finished_at IS NULL
      AND NOT EXISTS (SELECT 1 FROM email_attempts b
                       WHERE b.message_key = a.message_key AND b.id > a.id)
      AND NOT (o.status = 'processing' AND o.lease_token = a.lease_token
               AND o.locked_until > now())) AS abandoned,
  (SELECT count(*) FROM stripe_events
    WHERE outcome = 'conflict' AND first_received_at > now() - interval '24 hours') AS conflicts,
  (SELECT count(*) FROM resend_events
    WHERE outcome = 'unknown_email' AND received_at > now() - interval '24 hours')
      AS unknown_deliveries,
  (SELECT count(*) FROM email_outbox
    WHERE status = 'sent' AND sent_at > now() - interval '1 hour') AS sent_hour,
  (SELECT count(*) FROM email_outbox
    WHERE status = 'sent' AND sent_at > now() - interval '24 hours') AS sent_day
"""


@dataclass(frozen=True, kw_only=True)
class ProviderActivity:
    """Recent provider calls, for ``/metrics``: latency and answers by class."""

    window_seconds: int
    answers: dict[str, int]  # 2xx, 4xx, 5xx, timeout
    latency_count: int
    latency_sum: float
    latency_quantiles: dict[str, float] = field(default_factory=dict)


def read_provider_activity(conn: Connection, *, window_seconds: int = 900) -> ProviderActivity:
    """Attempts that finished within the window: how the provider answered, how fast.

    Only attempts started within twice the window are read (through the
    started_at index); a provider call lasts seconds, far less than that.
    """
    answers = {"2xx": 0, "4xx": 0, "5xx": 0, "timeout": 0}
    for row in conn.execute(
        f"""SELECT CASE WHEN http_status IS NULL THEN 'timeout'
                       WHEN http_status BETWEEN 200 AND 299 THEN '2xx'
                       WHEN http_status BETWEEN 400 AND 499 THEN '4xx'
                       WHEN http_status >= 500 THEN '5xx' END AS answer,
                  count(*) AS n
           FROM email_attempts
           WHERE finished_at > now() - make_interval(secs => %s)
             AND started_at > now() - make_interval(secs => %s) AND {_CALLED_PROVIDER}
           GROUP BY 1""",
        (window_seconds, window_seconds * 2),
    ):
        if row["answer"] is not None:
            answers[row["answer"]] = row["n"]
    latency = _one(
        conn,
        f"""SELECT count(*) AS n,
                  coalesce(sum(extract(epoch FROM finished_at - started_at)), 0)::float8 AS total,
                  percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP
                      (ORDER BY extract(epoch FROM finished_at - started_at)) AS quantiles
           FROM email_attempts
           WHERE finished_at > now() - make_interval(secs => %s)
             AND started_at > now() - make_interval(secs => %s) AND {_CALLED_PROVIDER}""",
        (window_seconds, window_seconds * 2),
    )
    assert latency is not None
    quantiles = latency["quantiles"] or []
    return ProviderActivity(
        window_seconds=window_seconds,
        answers=answers,
        latency_count=latency["n"],
        latency_sum=latency["total"],
        latency_quantiles={
            label: float(value)
            for label, value in zip(("0.5", "0.95", "0.99"), quantiles, strict=False)
        },
    )


# --- show ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Timeline:
    """Everything known about one message key, oldest first within each part."""

    message_key: str
    row: dict[str, Any]
    events: list[dict[str, Any]]
    attempts: list[dict[str, Any]]
    actions: list[dict[str, Any]]
    deliveries: list[dict[str, Any]]
    payload: dict[str, Any] | None = None


def find_keys(conn: Connection, key_or_invoice: str) -> list[str]:
    """The message keys a key or an invoice id names (account, mode, resends)."""
    if "/" in key_or_invoice:
        sql = "SELECT message_key FROM email_outbox WHERE message_key = %s"
    else:
        sql = (
            "SELECT message_key FROM email_outbox WHERE invoice_id = %s "
            "ORDER BY created_at, message_key"
        )
    return [row["message_key"] for row in conn.execute(sql, (key_or_invoice,))]


def read_timeline(conn: Connection, key: str, *, with_payload: bool = False) -> Timeline:
    row = _one(conn, f"SELECT {_ROW_COLUMNS} FROM email_outbox WHERE message_key = %s", (key,))
    assert row is not None, key
    payload = None
    if with_payload:
        found = _one(conn, "SELECT payload FROM email_outbox WHERE message_key = %s", (key,))
        payload = found["payload"] if found else None
    return Timeline(
        message_key=key,
        row=row,
        events=conn.execute(
            """SELECT event_id, event_type, outcome, detail, deliveries,
                      first_received_at, last_received_at
               FROM stripe_events WHERE message_key = %s ORDER BY first_received_at""",
            (key,),
        ).fetchall(),
        attempts=_attempts(conn, key),
        actions=conn.execute(
            """SELECT action, performed_by, reason, performed_at, details
               FROM operator_actions WHERE message_key = %s ORDER BY performed_at, id""",
            (key,),
        ).fetchall(),
        deliveries=conn.execute(
            """SELECT svix_id, event_type, email_id, outcome, occurred_at, received_at
               FROM resend_events WHERE message_key = %s
               UNION ALL
               SELECT svix_id, event_type, email_id, outcome, occurred_at, received_at
               FROM resend_events WHERE outcome = 'unknown_email' AND message_tag = %s
               ORDER BY received_at""",
            (key, resend_tag_value(key)),
        ).fetchall(),
        payload=payload,
    )


def _attempts(conn: Connection, key: str) -> list[dict[str, Any]]:
    rows = conn.execute(
        """SELECT a.attempt, a.worker_id, a.started_at, a.finished_at, a.http_status,
                  a.provider_error, a.provider_id, a.outcome,
                  (o.status = 'processing' AND o.lease_token = a.lease_token
                   AND o.locked_until > now()) AS lease_held,
                  a.started_at < now() - make_interval(secs => %s) AS beyond_key_window
           FROM email_attempts a JOIN email_outbox o USING (message_key)
           WHERE a.message_key = %s ORDER BY a.id""",
        (PROVIDER_KEY_RETENTION_HOURS * 3600, key),
    ).fetchall()
    for attempt in rows:
        attempt["uncertain"] = attempt_note(attempt)
    return rows


def may_have_been_accepted(attempt: dict[str, Any]) -> bool:
    """False only when the attempt provably did not make the provider send."""
    status = attempt.get("http_status")
    if status is not None and 400 <= status <= 499:
        return False
    return attempt.get("outcome") not in NOT_SENT_OUTCOMES


def attempt_note(attempt: dict[str, Any]) -> str | None:
    """Why an attempt leaves the provider's side unknown, or None if it does not."""
    if attempt["outcome"] is None and attempt["finished_at"] is None:
        if attempt.get("lease_held"):
            return "in flight"
        return "abandoned: the worker died mid-attempt; the provider may have accepted it"
    if attempt["outcome"] == "sent" or not may_have_been_accepted(attempt):
        return None
    if attempt["http_status"] is None:
        return "no answer (timeout or connection error); the provider may have accepted it"
    if 200 <= attempt["http_status"] <= 299:
        return "the provider answered 2xx but the receipt was not recorded as sent by it"
    return None


def _one(conn: Connection, sql: str, params: tuple[Any, ...] = ()) -> dict[str, Any] | None:
    found: dict[str, Any] | None = conn.execute(sql, params).fetchone()
    return found


def iso(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value is not None else "-"


def duration(seconds: float | None) -> str:
    """``2h 05m``, ``3m 07s``, ``-12m 00s`` (past due)."""
    if seconds is None:
        return "-"
    sign = "-" if seconds < 0 else ""
    whole = int(abs(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{sign}{days}d {hours:02d}h"
    if hours:
        return f"{sign}{hours}h {minutes:02d}m"
    return f"{sign}{minutes}m {secs:02d}s"
