"""The database side of delivery: lease ready rows, record what the provider said.

Delivery is two short transactions per attempt with no transaction open
during the send. :func:`claim_ready` runs ``delivery.sql: claim_ready``, one
statement that locks ready rows (skipping rows another worker has locked, so
no two workers take one row), moves those past the retry cutoff or the
attempt budget to review, and leases the rest (a fresh lease token,
``attempts + 1``, an in-flight ``email_attempts`` row). A leased row whose
email was left to its first claim is rendered then, and the email frozen by
a second statement (``freeze_rendered_payloads``) before anything is sent.
The two need not share a transaction: a worker that dies between them leaves
a leased row without an email, which the next claim takes once the lease
has run out and renders.
:func:`record_attempts` runs ``delivery.sql: record_attempts``, which stores
each answer only where the lease token still matches. docs/architecture.md,
"Delivery: claim, send, record", describes both.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from receipts import queries
from receipts.db import Connection
from receipts.delivery.decisions import AttemptResult
from receipts.logs import log_fields
from receipts.receipt.invoice_values import UnusableInvoice
from receipts.vocabulary import ReviewReason, RowStatus

_Q = queries.load("delivery")

log = logging.getLogger(__name__)

# (message key, what ingest stored to render it from) -> the email to freeze
RenderPayload = Callable[[str, dict[str, Any]], dict[str, Any]]


# A row past the cutoff or the budget is asked about at most this many attempts more.
LOOKUP_ATTEMPTS = 3


@dataclass(frozen=True, kw_only=True)
class PriorAttempt:
    """The latest earlier attempt of a row that may have reached the provider:
    unfinished (its worker died, or its answer was never written), lease_lost, or
    a retry. ``age_seconds`` is measured by the database's clock."""

    outcome: str | None
    http_status: int | None
    provider_error: str | None
    age_seconds: float


@dataclass(frozen=True, kw_only=True)
class ClaimedRow:
    """A row this worker holds under ``lease_token`` until its lease runs out."""

    message_key: str
    lease_token: UUID
    attempt: int  # the attempt number this claim made (attempts after + 1)
    attempt_id: int  # the email_attempts row recording this attempt
    payload: bytes  # the frozen payload, byte for byte as PostgreSQL prints it
    first_attempt_at: datetime | None = None
    prior: PriorAttempt | None = None
    # Leased only to ask the provider: without a yes it goes to review for this reason.
    past_limit: ReviewReason | None = None
    evidence_id: str | None = None  # a delivery webhook named this email id for the key
    # When the lease runs out at the latest, on this process's time.monotonic(): taken
    # before the claim, so never later than the server's locked_until.
    lease_expires: float = math.inf
    # The live batch this row is sent in (receipts.delivery.batches), and its place there.
    batch_key: str | None = None
    batch_position: int | None = None


@dataclass(frozen=True, kw_only=True)
class ClaimedBatch:
    """A batch this worker holds: its key, the members it leased (in batch order),
    and the request body (every member's frozen email, in order, as first sent).

    ``body`` is None when the stored emails no longer make the bytes the first
    attempt sent (the digest differs): the batch is then sent nowhere."""

    batch_key: str
    rows: list[ClaimedRow]
    body: bytes | None
    size: int  # emails in the body: members answered earlier included

    @property
    def attempt(self) -> int:
        """The batch's attempt number: that of its most tried member."""
        return max(row.attempt for row in self.rows)


@dataclass(frozen=True, kw_only=True)
class SkippedRow:
    """A ready row that went to review at claim time instead of being sent."""

    message_key: str
    review_reason: ReviewReason  # retry_window_elapsed | attempts_exhausted | render_failed …


@dataclass(frozen=True, kw_only=True)
class Claim:
    rows: list[ClaimedRow]  # sent one request each
    skipped: list[SkippedRow]
    batches: list[ClaimedBatch] = field(default_factory=list)  # sent one request per batch

    @property
    def in_hand(self) -> int:
        """Rows this claim leased: single ones and batch members."""
        return len(self.rows) + sum(len(batch.rows) for batch in self.batches)


def claim_ready(
    conn: Connection,
    *,
    limit: int,
    worker_id: str,
    lease_seconds: float,
    max_attempts: int,
    retry_cutoff_hours: float,
    render: RenderPayload,
    look_up_past_limit: bool = False,
) -> Claim:
    """Lease up to ``limit`` ready rows (commit before sending; autocommit will do).

    Ready means pending and due, or processing with an expired lease (its
    worker died or lost touch). Rows past the retry cutoff or the attempt
    budget go to review here, without a send, unless ``look_up_past_limit``
    (the provider can say whether it accepted an earlier attempt) and one may
    have reached it: those are leased with ``past_limit`` set. Rows claimed for the first time
    without an email get it from ``render``, frozen before this returns.
    """
    if limit <= 0:
        return Claim(rows=[], skipped=[])
    lease_expires = time.monotonic() + lease_seconds
    found = conn.execute(
        _Q["claim_ready"],
        {
            "limit": limit,
            "worker_id": worker_id,
            "lease_seconds": float(lease_seconds),
            "max_attempts": max_attempts,
            "cutoff_seconds": retry_cutoff_hours * 3600.0,
            "look_up_past_limit": look_up_past_limit,
            "lookup_attempts": LOOKUP_ATTEMPTS,
        },
    ).fetchall()
    leased = [row for row in found if row["review_reason"] is None]
    unrendered = [row for row in leased if row["payload_text"] is None]
    unrenderable = _render_first_claims(conn, unrendered, render) if unrendered else []
    return Claim(
        rows=[_claimed(row, lease_expires) for row in leased if row["payload_text"] is not None],
        skipped=[
            SkippedRow(
                message_key=row["message_key"], review_reason=ReviewReason(row["review_reason"])
            )
            for row in found
            if row["review_reason"] is not None
        ]
        + unrenderable,
    )


def _render_first_claims(
    conn: Connection, rows: list[dict[str, Any]], render: RenderPayload
) -> list[SkippedRow]:
    """Render and freeze each row's email (setting ``payload_text``); review the ones that fail."""
    rendered: list[tuple[dict[str, Any], dict[str, Any]]] = []
    failed: list[tuple[dict[str, Any], ReviewReason, str]] = []
    for row in rows:
        try:
            rendered.append((row, render(row["message_key"], row["render_input"])))
        except UnusableInvoice as unusable:
            why = unusable.detail or type(unusable).__name__
            failed.append((row, ReviewReason(unusable.reason), why))
        except Exception as error:  # a template may raise anything
            failed.append((row, ReviewReason.RENDER_FAILED, type(error).__name__))
    if rendered:
        _freeze(conn, rendered)
    if failed:
        _review_unrenderable(conn, failed)
    return [SkippedRow(message_key=row["message_key"], review_reason=why) for row, why, _ in failed]


def _freeze(conn: Connection, rendered: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    stored = conn.execute(
        _Q["freeze_rendered_payloads"],
        {
            # One JSON document: an array of jsonb would be escaped element by element.
            "rendered": Jsonb(
                [
                    {
                        "message_key": row["message_key"],
                        "lease_token": str(row["lease_token"]),
                        "payload": payload,
                    }
                    for row, payload in rendered
                ]
            )
        },
    ).fetchall()
    texts = {found["message_key"]: found["payload_text"] for found in stored}
    for row, _ in rendered:
        # Missing only if the lease ran out before the email was frozen: the row
        # is another worker's now, so this claim lets it go unsent.
        row["payload_text"] = texts.get(row["message_key"])


def _review_unrenderable(
    conn: Connection, failed: list[tuple[dict[str, Any], ReviewReason, str]]
) -> None:
    for row, reason, error in failed:
        # The error's type, or an unusable invoice's own detail (numbers only):
        # an exception's message may quote customer data.
        log_fields(
            log,
            "receipt cannot be rendered",
            logging.ERROR,
            key=row["message_key"],
            reason=reason,
            error=error,
        )
    conn.execute(
        _Q["review_unrenderable"],
        {
            "keys": [row["message_key"] for row, _, _ in failed],
            "tokens": [row["lease_token"] for row, _, _ in failed],
            "reasons": [str(reason) for _, reason, _ in failed],
            "errors": [error for _, _, error in failed],
            "attempt_ids": [row["attempt_id"] for row, _, _ in failed],
        },
    )


def _claimed(row: dict[str, Any], lease_expires: float) -> ClaimedRow:
    prior = None
    if row["prior_age_seconds"] is not None:
        prior = PriorAttempt(
            outcome=row["prior_outcome"],
            http_status=row["prior_http_status"],
            provider_error=row["prior_error"],
            age_seconds=row["prior_age_seconds"],
        )
    return ClaimedRow(
        message_key=row["message_key"],
        lease_token=row["lease_token"],
        attempt=row["attempts"],
        attempt_id=row["attempt_id"],
        payload=row["payload_text"].encode("utf-8"),
        first_attempt_at=row["first_attempt_at"],
        prior=prior,
        past_limit=ReviewReason(row["past_limit"]) if row["past_limit"] else None,
        evidence_id=row["evidence_id"],
        lease_expires=lease_expires,
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
