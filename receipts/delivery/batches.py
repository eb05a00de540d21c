"""Idempotent batches: many receipts in one provider request, each sent exactly once.

With ``RECEIPTS_BATCH_SIZE`` above 1 (and a provider with a batch endpoint:
Resend's ``POST /emails/batch``), the worker groups the rows a claim leased
into batches (:func:`form_batches`). Before the first attempt each batch is
written to the database (``delivery.sql: form_batches``): its own
Idempotency-Key (``batch/<uuid>``), its size, the digest of its request body,
and on every member row the batch and its place in it. The body is the
members' frozen emails, in that order, as one JSON array; a trigger keeps
each frozen email from changing, so the body can always be made again.

A batch whose answer was not a final one (no answer, a 5xx, a rate limit…)
stays live: its rows are never claimed on their own (``delivery.sql:
claim_ready`` skips them) but only with their batch (:func:`claim_batches`,
``delivery.sql: claim_batches``), once every unanswered member is ready, and
the batch is sent again whole, in the same order, with the same bytes (the
digest is checked) under the same key. So a crash after the provider
accepted a batch gets the provider's first answer replayed, never a second
send. The batch's lease is its rows' ``locked_until``; the retry cutoff and
the attempt budget are those of its oldest member, and a batch past either
goes to review whole, without a send.

Only a row that no earlier attempt can have delivered joins a new batch
(:func:`may_join_batch`): a row retried after an ambiguous single send keeps
its own key. A row with an attachment (the PDF receipt) never joins one:
Resend's batch endpoint takes none. docs/architecture.md, "Batches".
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from receipts import queries
from receipts.config import Settings
from receipts.db import Connection
from receipts.delivery import claims
from receipts.delivery.answers import BatchAnswer, json_object
from receipts.delivery.decisions import AttemptResult, Decision, decide
from receipts.delivery.rules import AnswerTable
from receipts.logs import log_fields
from receipts.vocabulary import AttemptOutcome, ReviewReason, RowStatus

_Q = queries.load("delivery")

log = logging.getLogger(__name__)

BATCH_KEY_PREFIX = "batch/"
# A permissive batch answer names a refused email by index; its row goes to review so.
REFUSED_IN_BATCH = "validation_error"
# The stored emails of a live batch no longer make the body its first attempt sent.
BATCH_BODY_CHANGED = "batch_body_changed"


def new_batch_key() -> str:
    """A batch's own Idempotency-Key: never a message key (those start with an account)."""
    return f"{BATCH_KEY_PREFIX}{uuid.uuid4()}"


def batch_body(payloads: Sequence[bytes]) -> bytes:
    """The request body: each frozen email as stored, in order, in one JSON array."""
    return b"[" + b",".join(payloads) + b"]"


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def may_join_batch(row: claims.ClaimedRow) -> bool:
    """A row no earlier attempt can have delivered, without an attachment, not past a
    limit and not already in a batch: only such a row may go out under a new key."""
    return (
        row.prior is None
        and row.past_limit is None
        and row.evidence_id is None
        and row.batch_key is None
        and "attachments" not in json_object(row.payload)
    )


def form_batches(
    conn: Connection,
    rows: list[claims.ClaimedRow],
    *,
    size: int,
    provider: str,
    worker_id: str,
    sendable: Callable[[claims.ClaimedRow], bool],
) -> tuple[list[claims.ClaimedBatch], list[claims.ClaimedRow]]:
    """Group the rows a claim leased into batches of up to ``size``, written before any
    send; returns the batches and the rows that go singly. ``sendable`` says which rows
    may be sent at all (the worker's own look at a frozen email): the others go singly,
    to be refused there."""
    joining = [row for row in rows if may_join_batch(row) and sendable(row)]
    groups = [joining[start : start + size] for start in range(0, len(joining), size)]
    groups = [group for group in groups if len(group) > 1]
    if not groups:
        return [], rows
    batches = [_new_batch(group) for group in groups]
    if not _write_batches(conn, batches, provider=provider, worker_id=worker_id):
        return [], rows
    members = {row.message_key for batch in batches for row in batch.rows}
    return batches, [row for row in rows if row.message_key not in members]


def _new_batch(group: list[claims.ClaimedRow]) -> claims.ClaimedBatch:
    key = new_batch_key()
    members = [
        replace(row, batch_key=key, batch_position=position) for position, row in enumerate(group)
    ]
    body = batch_body([row.payload for row in group])
    return claims.ClaimedBatch(batch_key=key, rows=members, body=body, size=len(members))


def _write_batches(
    conn: Connection, batches: list[claims.ClaimedBatch], *, provider: str, worker_id: str
) -> bool:
    """Store the batches and their members in one transaction; False (nothing stored)
    if a member's lease was lost meanwhile: then every row goes singly."""
    described = [
        {
            "batch_key": batch.batch_key,
            "provider": provider,
            "size": batch.size,
            "body_sha256": body_digest(batch.body or b""),
            "worker_id": worker_id,
        }
        for batch in batches
    ]
    members = [
        {
            "batch_key": batch.batch_key,
            "position": row.batch_position,
            "message_key": row.message_key,
            "lease_token": str(row.lease_token),
        }
        for batch in batches
        for row in batch.rows
    ]
    with conn.transaction():
        named = conn.execute(
            _Q["form_batches"], {"batches": Jsonb(described), "members": Jsonb(members)}
        ).fetchall()
        if len(named) != len(members):
            raise psycopg.Rollback()  # leaves the block: nothing stored
        return True
    return False


def claim_batches(
    conn: Connection,
    *,
    limit: int,
    worker_id: str,
    lease_seconds: float,
    max_attempts: int,
    retry_cutoff_hours: float,
    lease_expires: float,
) -> tuple[list[claims.ClaimedBatch], list[claims.SkippedRow]]:
    """Lease up to ``limit`` live batches to send again, each with the body its first
    attempt sent; batches past the cutoff or the budget go to review (skipped rows)."""
    if limit <= 0:
        return [], []
    found = conn.execute(
        _Q["claim_batches"],
        {
            "limit": limit,
            "worker_id": worker_id,
            "lease_seconds": float(lease_seconds),
            "max_attempts": max_attempts,
            "cutoff_seconds": retry_cutoff_hours * 3600.0,
        },
    ).fetchall()
    skipped = [
        claims.SkippedRow(
            message_key=row["message_key"], review_reason=ReviewReason(row["review_reason"])
        )
        for row in found
        if row["review_reason"] is not None
    ]
    members: dict[str, list[claims.ClaimedRow]] = {}
    for row in found:
        if row["review_reason"] is None:
            members.setdefault(row["batch_key"], []).append(_member(row, lease_expires))
    return _with_bodies(conn, members), skipped


def _member(row: dict[str, Any], lease_expires: float) -> claims.ClaimedRow:
    return claims.ClaimedRow(
        message_key=row["message_key"],
        lease_token=row["lease_token"],
        attempt=row["attempts"],
        attempt_id=row["attempt_id"],
        payload=b"",  # the batch's body carries it
        first_attempt_at=row["first_attempt_at"],
        lease_expires=lease_expires,
        batch_key=row["batch_key"],
        batch_position=row["batch_position"],
    )


def _with_bodies(
    conn: Connection, members: dict[str, list[claims.ClaimedRow]]
) -> list[claims.ClaimedBatch]:
    """Each leased batch with the body made again from its stored emails, or None where
    it would not be the bytes its first attempt sent."""
    if not members:
        return []
    stored = {
        row["batch_key"]: row
        for row in conn.execute(_Q["batch_bodies"], {"batch_keys": list(members)}).fetchall()
    }
    batches = []
    for key, rows in members.items():
        found = stored.get(key)
        body = found["body"].encode("utf-8") if found and found["body"] else None
        same = (
            found is not None
            and body is not None
            and found["members"] == found["size"]
            and body_digest(body) == found["body_sha256"]
        )
        rows.sort(key=lambda row: row.batch_position or 0)
        size = found["size"] if found else len(rows)
        batches.append(
            claims.ClaimedBatch(batch_key=key, rows=rows, body=body if same else None, size=size)
        )
    return batches


def batch_decision(
    answered: BatchAnswer,
    batch: claims.ClaimedBatch,
    settings: Settings,
    *,
    now: datetime,
    table: AnswerTable,
) -> tuple[Decision, list[AttemptResult]]:
    """What a batch answer means: for the worker's pace and run (one decision, as for a
    single send), and for each leased member, in ``batch.rows`` order.

    A 2xx accounting for every email gives each row its own id, or review with the
    provider's message for an email it refused; any other answer stands for every
    row alike (a retry of the whole batch, review, or a configuration stop)."""
    decision = decide(answered.answer, batch.attempt, settings, now=now, table=table)
    if answered.items is None:
        return decision, [decision.result for _ in batch.rows]
    results = []
    for row in batch.rows:
        item = answered.items[row.batch_position or 0]
        if item.provider_id is not None:
            results.append(
                AttemptResult(
                    status=RowStatus.SENT,
                    outcome=AttemptOutcome.SENT,
                    http_status=answered.answer.http_status,
                    provider_id=item.provider_id,
                )
            )
        else:
            results.append(_refused(answered.answer.http_status, item.error_message))
    return decision, results


def _refused(http_status: int | None, message: str | None) -> AttemptResult:
    return AttemptResult(
        status=RowStatus.REVIEW,
        outcome=AttemptOutcome.REVIEW,
        http_status=http_status,
        provider_error=REFUSED_IN_BATCH,
        provider_message=message,
        review_reason=REFUSED_IN_BATCH,
        last_error=REFUSED_IN_BATCH,
    )


def body_changed(batch: claims.ClaimedBatch) -> AttemptResult:
    """A live batch whose stored emails no longer make its first body: sent nowhere,
    to a person (sending other bytes under its key could never be a replay)."""
    log_fields(
        log,
        "batch cannot be sent again as it was first sent; its receipts go to review",
        logging.ERROR,
        batch=batch.batch_key,
        rows=len(batch.rows),
    )
    return AttemptResult(
        status=RowStatus.REVIEW,
        outcome=AttemptOutcome.REVIEW,
        refund_attempt=True,
        review_reason=BATCH_BODY_CHANGED,
        last_error=BATCH_BODY_CHANGED,
    )
