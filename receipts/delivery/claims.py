"""The database side of delivery: lease ready rows, record what the provider said.

Delivery is two short transactions per attempt with no transaction open
during the send. :func:`claim_ready` runs ``delivery.sql: claim_ready``, one
statement that locks ready rows (skipping rows another worker has locked, so
no two workers take one row), moves those past the retry cutoff or the
attempt budget to review, and leases the rest (a fresh lease token,
``attempts + 1``, an in-flight ``email_attempts`` row).
:func:`record_attempts` runs ``delivery.sql: record_attempts``, which stores
each answer only where the lease token still matches. docs/architecture.md,
"Delivery: claim, send, record", describes both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from receipts import queries
from receipts.db import Connection
from receipts.delivery.decisions import AttemptResult
from receipts.vocabulary import ReviewReason, RowStatus

__all__ = [
    "AttemptResult",
    "Claim",
    "ClaimedRow",
    "SkippedRow",
    "claim_ready",
    "record_attempt",
    "record_attempts",
]

_Q = queries.load("delivery")


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
    review_reason: ReviewReason  # retry_window_elapsed | attempts_exhausted


@dataclass(frozen=True, kw_only=True)
class Claim:
    rows: list[ClaimedRow]
    skipped: list[SkippedRow]


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
    if limit <= 0:
        return Claim(rows=[], skipped=[])
    found = conn.execute(
        _Q["claim_ready"],
        {
            "limit": limit,
            "worker_id": worker_id,
            "lease_seconds": float(lease_seconds),
            "max_attempts": max_attempts,
            "cutoff_seconds": retry_cutoff_hours * 3600.0,
        },
    ).fetchall()
    return Claim(
        rows=[_claimed(row) for row in found if row["review_reason"] is None],
        skipped=[
            SkippedRow(
                message_key=row["message_key"], review_reason=ReviewReason(row["review_reason"])
            )
            for row in found
            if row["review_reason"] is not None
        ],
    )


def _claimed(row: dict[str, Any]) -> ClaimedRow:
    return ClaimedRow(
        message_key=row["message_key"],
        lease_token=row["lease_token"],
        attempt=row["attempts"],
        attempt_id=row["attempt_id"],
        payload=row["payload_text"].encode("utf-8"),
    )


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
        "statuses": [str(result.status) for _, result in answered],
        "outcomes": [str(result.outcome) for _, result in answered],
        "provider_ids": [result.provider_id for _, result in answered],
        "reasons": [
            result.review_reason if result.status == RowStatus.REVIEW else None
            for _, result in answered
        ],
        "delays": [float(result.retry_in_seconds) for _, result in answered],
        "refunds": [1 if result.refund_attempt else 0 for _, result in answered],
        "last_errors": [result.last_error for _, result in answered],
        "http_statuses": [result.http_status for _, result in answered],
        "provider_errors": [result.provider_error for _, result in answered],
        "provider_messages": [result.provider_message for _, result in answered],
    }
    rows = conn.execute(_Q["record_attempts"], columns).fetchall()
    held = {row["id"]: row["held"] for row in rows}
    return [held.get(row.attempt_id, False) for row, _ in answered]


def record_attempt(conn: Connection, claimed: ClaimedRow, result: AttemptResult) -> bool:
    """One outcome; see :func:`record_attempts`."""
    [held] = record_attempts(conn, [(claimed, result)])
    return held
