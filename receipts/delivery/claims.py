"""The database side of delivery: lease ready rows, record what the provider said.

Delivery is two short transactions per attempt with no transaction open
during the send: :func:`claim_ready` leases rows (``FOR UPDATE SKIP LOCKED``,
a fresh lease token, ``attempts + 1``, an in-flight ``email_attempts`` row),
and :func:`record_attempts` stores the provider's answer only where the lease
token still matches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from psycopg import sql

from receipts.db import Connection


@dataclass(frozen=True, kw_only=True)
class ClaimedRow:
    """A row this worker holds under ``lease_token`` until its lease runs out."""

    message_key: str
    lease_token: UUID
    attempt: int  # the attempt number this claim made (attempts after + 1)
    attempt_id: int  # the email_attempts row recording this attempt
    payload: bytes  # the frozen payload, byte for byte as PostgreSQL prints it


@dataclass(frozen=True, kw_only=True)
class SkippedRow:
    """A ready row that went to review at claim time instead of being sent."""

    message_key: str
    review_reason: str  # retry_window_elapsed | attempts_exhausted


@dataclass(frozen=True, kw_only=True)
class Claim:
    rows: list[ClaimedRow]
    skipped: list[SkippedRow]


@dataclass(frozen=True, kw_only=True)
class AttemptResult:
    """How one attempt ends: the row's next state and the attempt log entry."""

    status: str  # pending | sent | review
    outcome: str  # the email_attempts.outcome value
    retry_in_seconds: float = 0.0  # for pending: when the row is ready again
    refund_attempt: bool = False  # the attempt did not count against the budget
    http_status: int | None = None
    provider_error: str | None = None
    provider_id: str | None = None
    review_reason: str | None = None
    last_error: str | None = None


def claim_ready(
    conn: Connection,
    *,
    limit: int,
    worker_id: str,
    lease_seconds: float,
    max_attempts: int,
    retry_cutoff_hours: float,
) -> Claim:
    """Lease up to ``limit`` ready rows (one transaction; commit before sending).

    Ready means pending and due, or processing with an expired lease (its
    worker died or lost touch). Rows past the retry cutoff or the attempt
    budget go to review here, without a send.
    """
    ready = _lock_ready(conn, "processing", "locked_until", limit, retry_cutoff_hours)
    ready += _lock_ready(conn, "pending", "available_at", limit - len(ready), retry_cutoff_hours)
    skipped = [
        SkippedRow(
            message_key=row["message_key"],
            review_reason="retry_window_elapsed" if row["past_cutoff"] else "attempts_exhausted",
        )
        for row in ready
        if row["past_cutoff"] or row["attempts"] >= max_attempts
    ]
    if skipped:
        _skip_to_review(conn, skipped, worker_id)
    skipped_keys = {row.message_key for row in skipped}
    sendable = [row["message_key"] for row in ready if row["message_key"] not in skipped_keys]
    return Claim(rows=_lease(conn, sendable, worker_id, lease_seconds), skipped=skipped)


def _lock_ready(
    conn: Connection, status: str, due_column: str, limit: int, cutoff_hours: float
) -> list[dict[str, Any]]:
    """Lock due rows of one status, oldest first, through that status's partial index."""
    if limit <= 0:
        return []
    query = sql.SQL(
        """SELECT message_key, attempts,
                  (first_attempt_at IS NOT NULL
                   AND first_attempt_at <= now() - make_interval(secs => %(cutoff)s))
                      AS past_cutoff
             FROM email_outbox
            WHERE status = {status} AND {due} <= now()
            ORDER BY {due}
            LIMIT %(limit)s
              FOR UPDATE SKIP LOCKED"""
    ).format(status=sql.Literal(status), due=sql.Identifier(due_column))
    # The status is a literal so that the planner can match the partial index.
    params = {"cutoff": cutoff_hours * 3600.0, "limit": limit}
    return conn.execute(query, params).fetchall()


def _skip_to_review(conn: Connection, skipped: list[SkippedRow], worker_id: str) -> None:
    keys = [row.message_key for row in skipped]
    reasons = [row.review_reason for row in skipped]
    conn.execute(
        """WITH decided AS (
               SELECT * FROM unnest(%(keys)s::text[], %(reasons)s::text[]) AS d(key, reason)
           ), moved AS (
               UPDATE email_outbox AS o
                  SET status = 'review', review_reason = decided.reason,
                      lease_token = NULL, locked_until = NULL, updated_at = now()
                 FROM decided
                WHERE o.message_key = decided.key
            RETURNING o.message_key, o.attempts, decided.reason
           )
           INSERT INTO email_attempts
               (message_key, attempt, worker_id, lease_token, finished_at, outcome)
           SELECT message_key, attempts + 1, %(worker)s, gen_random_uuid(), now(),
                  CASE reason WHEN 'retry_window_elapsed' THEN 'skipped_cutoff'
                              ELSE 'skipped_budget' END
             FROM moved""",
        {"keys": keys, "reasons": reasons, "worker": worker_id},
    )


def _lease(
    conn: Connection, keys: list[str], worker_id: str, lease_seconds: float
) -> list[ClaimedRow]:
    if not keys:
        return []
    rows = conn.execute(
        """WITH claimed AS (
               UPDATE email_outbox
                  SET status = 'processing',
                      lease_token = gen_random_uuid(),
                      locked_until = now() + make_interval(secs => %(lease)s),
                      first_attempt_at = coalesce(first_attempt_at, now()),
                      attempts = attempts + 1,
                      updated_at = now()
                WHERE message_key = ANY(%(keys)s)
            RETURNING message_key, lease_token, attempts, payload
           ), logged AS (
               INSERT INTO email_attempts (message_key, attempt, worker_id, lease_token)
               SELECT message_key, attempts, %(worker)s, lease_token FROM claimed
               RETURNING id, message_key
           )
           SELECT c.message_key, c.lease_token, c.attempts, c.payload::text AS payload_text,
                  l.id AS attempt_id
             FROM claimed AS c JOIN logged AS l USING (message_key)""",
        {"keys": keys, "lease": float(lease_seconds), "worker": worker_id},
    ).fetchall()
    return [
        ClaimedRow(
            message_key=row["message_key"],
            lease_token=row["lease_token"],
            attempt=row["attempts"],
            attempt_id=row["attempt_id"],
            payload=row["payload_text"].encode("utf-8"),
        )
        for row in rows
    ]


def record_attempts(
    conn: Connection, answered: list[tuple[ClaimedRow, AttemptResult]]
) -> list[bool]:
    """Store each outcome where we still hold the lease; False where we lost it.

    The outbox write is guarded by the lease token, so a worker whose lease
    expired never overwrites the state a newer worker wrote; its attempt is
    logged as ``lease_lost``. One statement for the whole batch.
    """
    if not answered:
        return []
    columns: dict[str, list[Any]] = {
        "keys": [row.message_key for row, _ in answered],
        "tokens": [row.lease_token for row, _ in answered],
        "attempt_ids": [row.attempt_id for row, _ in answered],
        "statuses": [result.status for _, result in answered],
        "outcomes": [result.outcome for _, result in answered],
        "provider_ids": [result.provider_id for _, result in answered],
        "reasons": [
            result.review_reason if result.status == "review" else None for _, result in answered
        ],
        "delays": [float(result.retry_in_seconds) for _, result in answered],
        "refunds": [1 if result.refund_attempt else 0 for _, result in answered],
        "last_errors": [result.last_error for _, result in answered],
        "http_statuses": [result.http_status for _, result in answered],
        "provider_errors": [result.provider_error for _, result in answered],
    }
    rows = conn.execute(
        """WITH answer AS (
               SELECT * FROM unnest(
                   %(keys)s::text[], %(tokens)s::uuid[], %(attempt_ids)s::bigint[],
                   %(statuses)s::text[], %(outcomes)s::text[], %(provider_ids)s::text[],
                   %(reasons)s::text[], %(delays)s::float8[], %(refunds)s::int[],
                   %(last_errors)s::text[], %(http_statuses)s::int[],
                   %(provider_errors)s::text[])
                 AS a(message_key, lease_token, attempt_id, status, outcome, provider_id,
                      review_reason, delay, refund, last_error, http_status, provider_error)
           ), stored AS (
               UPDATE email_outbox AS o
                  SET status = a.status,
                      provider_id = coalesce(a.provider_id, o.provider_id),
                      sent_at = CASE WHEN a.status = 'sent' THEN now() ELSE o.sent_at END,
                      review_reason = a.review_reason,
                      available_at = CASE WHEN a.status = 'pending'
                                          THEN now() + make_interval(secs => a.delay)
                                          ELSE o.available_at END,
                      attempts = o.attempts - a.refund,
                      last_error = coalesce(a.last_error, o.last_error),
                      lease_token = NULL, locked_until = NULL, updated_at = now()
                 FROM answer AS a
                WHERE o.message_key = a.message_key AND o.lease_token = a.lease_token
                  AND o.status = 'processing'
            RETURNING o.message_key
           )
           UPDATE email_attempts AS t
              SET finished_at = now(),
                  outcome = CASE WHEN s.message_key IS NULL THEN 'lease_lost' ELSE a.outcome END,
                  http_status = a.http_status, provider_error = a.provider_error,
                  provider_id = a.provider_id
             FROM answer AS a LEFT JOIN stored AS s USING (message_key)
            WHERE t.id = a.attempt_id
        RETURNING t.id, s.message_key IS NOT NULL AS held""",
        columns,
    ).fetchall()
    held = {row["id"]: row["held"] for row in rows}
    return [held.get(row.attempt_id, False) for row, _ in answered]


def record_attempt(conn: Connection, claimed: ClaimedRow, result: AttemptResult) -> bool:
    """One outcome; see :func:`record_attempts`."""
    [held] = record_attempts(conn, [(claimed, result)])
    return held
