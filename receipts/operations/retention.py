"""Retention: what ``receipts prune`` may drop, and how it drops it in batches.

Three things grow with every paid invoice: the event log, the attempt log and
the outbox rows with their frozen emails. Prune drops, in short batches:

* Stripe events first received, and Resend delivery events received, before
  the details cutoff (a delivery event that matched no receipt is kept: it
  is evidence of a send a person may need);
* for ``sent`` receipts settled before the details cutoff: their attempt log
  and their frozen payload (the email was sent; its bytes are not needed);
* ``sent`` receipts settled before the keys cutoff, whole.

The message key is the only thing that stops a late redelivery (Stripe's
manual "resend" works for 30 days) from queueing a second email, so keys are
kept for at least :data:`MIN_KEEP_KEYS_DAYS`. Rows in ``pending``,
``processing`` or ``review`` are never touched: they are unfinished work or
evidence a person needs; the operator action log is never pruned. A
receipt is "settled" at the later of ``sent_at`` and ``created_at``, so a
receipt imported today with an old send time keeps its key for the full
period from now. The statements are in ``receipts/queries/retention.sql``;
why the key must outlive Stripe's redeliveries is in ``docs/architecture.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from receipts import queries
from receipts.db import Connection, Database

_RETENTION = queries.load("retention")

# Stripe lets a person resend an event for 30 days; keep keys safely beyond.
MIN_KEEP_KEYS_DAYS = 35
DEFAULT_KEEP_KEYS_DAYS = 400
MIN_KEEP_DETAILS_DAYS = 1
DEFAULT_KEEP_DETAILS_DAYS = 30
DEFAULT_BATCH_SIZE = 5000

# Events are pruned by walking the table in ranges of this many 8 kB pages, so
# ingest needs no index on their age.
EVENT_PAGES_PER_BATCH = 2000


class RetentionError(ValueError):
    """A retention setting that would risk a second email; the message says which."""


@dataclass(frozen=True, kw_only=True)
class Policy:
    keep_keys_days: int = DEFAULT_KEEP_KEYS_DAYS
    keep_details_days: int = DEFAULT_KEEP_DETAILS_DAYS
    batch_size: int = DEFAULT_BATCH_SIZE

    def __post_init__(self) -> None:
        if self.keep_keys_days < MIN_KEEP_KEYS_DAYS:
            raise RetentionError(
                f"--keep-keys-days must be at least {MIN_KEEP_KEYS_DAYS}: a message key is what "
                f"stops a redelivery (Stripe resends for 30 days) from sending again, "
                f"got {self.keep_keys_days}"
            )
        if self.keep_details_days < MIN_KEEP_DETAILS_DAYS:
            raise RetentionError(
                f"--keep-details-days must be at least {MIN_KEEP_DETAILS_DAYS}, "
                f"got {self.keep_details_days}"
            )
        if self.keep_details_days > self.keep_keys_days:
            raise RetentionError(
                f"--keep-details-days ({self.keep_details_days}) cannot exceed "
                f"--keep-keys-days ({self.keep_keys_days})"
            )
        if self.batch_size < 1:
            raise RetentionError(f"--batch-size must be at least 1, got {self.batch_size}")


@dataclass(frozen=True, kw_only=True)
class Cutoffs:
    keys_before: datetime
    details_before: datetime


@dataclass(kw_only=True)
class PruneCounts:
    events: int = 0
    delivery_events: int = 0
    attempts: int = 0
    payloads: int = 0
    receipts: int = 0
    batches: int = 0


def cutoffs(conn: Connection, policy: Policy) -> Cutoffs:
    """Both cutoffs from the database clock, so every process agrees on 'now'."""
    row = conn.execute(_RETENTION["database_now"]).fetchone()
    assert row is not None
    now: datetime = row["now"]
    return Cutoffs(
        keys_before=now - timedelta(days=policy.keep_keys_days),
        details_before=now - timedelta(days=policy.keep_details_days),
    )


def count_prunable(conn: Connection, cut: Cutoffs) -> PruneCounts:
    """What :func:`prune` would drop now, changing nothing."""
    row = conn.execute(
        _RETENTION["count_prunable"], {"details": cut.details_before, "keys": cut.keys_before}
    ).fetchone()
    assert row is not None
    return PruneCounts(**row)


def prune(database: Database, policy: Policy) -> PruneCounts:
    """Drop what the policy allows, one short transaction per batch."""
    with database.transaction() as conn:
        cut = cutoffs(conn, policy)
    counts = PruneCounts()
    counts.events = _drop_old_events(database, cut)
    counts.delivery_events = _repeat(database, _drop_delivery_events_batch, cut, policy.batch_size)
    counts.receipts, attempts_of_dropped = _drop_old_receipts(database, cut, policy.batch_size)
    counts.batches = _repeat(database, _drop_finished_batches_batch, cut, policy.batch_size)
    payloads, attempts_of_kept = _drop_old_details(database, cut, policy.batch_size)
    counts.payloads = payloads
    counts.attempts = attempts_of_dropped + attempts_of_kept
    return counts


def _repeat(
    database: Database, batch: Callable[[Connection, Cutoffs, int], int], cut: Cutoffs, size: int
) -> int:
    total = 0
    while True:
        with database.transaction() as conn:
            done = batch(conn, cut, size)
        total += done
        if done < size:
            return total


def _drop_old_events(database: Database, cut: Cutoffs) -> int:
    """Delete old Stripe events, one range of table pages per transaction."""
    with database.transaction() as conn:
        row = conn.execute(_RETENTION["stripe_events_pages"]).fetchone()
    pages = int(row["pages"]) if row else 0
    dropped = 0
    for first in range(0, pages + 1, EVENT_PAGES_PER_BATCH):
        with database.transaction() as conn:
            dropped += conn.execute(
                _RETENTION["delete_stripe_events_in_pages"],
                {
                    "first_page": f"({first},0)",
                    "end_page": f"({first + EVENT_PAGES_PER_BATCH},0)",
                    "before": cut.details_before,
                },
            ).rowcount
    return dropped


def _drop_delivery_events_batch(conn: Connection, cut: Cutoffs, size: int) -> int:
    return conn.execute(
        _RETENTION["delete_delivery_events_batch"], {"before": cut.details_before, "size": size}
    ).rowcount


def _drop_finished_batches_batch(conn: Connection, cut: Cutoffs, size: int) -> int:
    """Provider batches whose receipts are all gone (run after the receipts)."""
    return conn.execute(
        _RETENTION["delete_finished_batches_batch"], {"before": cut.keys_before, "size": size}
    ).rowcount


def _drop_old_receipts(database: Database, cut: Cutoffs, size: int) -> tuple[int, int]:
    """Delete sent rows past the keys cutoff, with their attempts; (rows, attempts)."""
    rows = attempts = 0
    while True:
        with database.transaction() as conn:
            found = conn.execute(
                _RETENTION["delete_settled_receipts_batch"],
                {"before": cut.keys_before, "size": size},
            ).fetchone()
        assert found is not None
        rows += found["rows"]
        attempts += found["attempts"]
        if found["rows"] < size:
            return rows, attempts


def _drop_old_details(database: Database, cut: Cutoffs, size: int) -> tuple[int, int]:
    """Clear payloads and attempts of sent rows past the details cutoff; (payloads, attempts).

    Walks the settled-time index forward (keyset pagination) so every batch
    starts where the last one ended instead of rescanning cleared rows.
    """
    payloads = attempts = 0
    after: tuple[datetime, str] | None = None
    while True:
        with database.transaction() as conn:
            batch = conn.execute(
                _RETENTION["lock_settled_with_details"],
                {
                    "details": cut.details_before,
                    "keys": cut.keys_before,
                    "after_at": after[0] if after else None,
                    "after_key": after[1] if after else None,
                    "size": size,
                },
            ).fetchall()
            keys = [row["message_key"] for row in batch]
            if keys:
                attempts += conn.execute(_RETENTION["delete_attempts_of"], {"keys": keys}).rowcount
                payloads += conn.execute(_RETENTION["clear_payloads_of"], {"keys": keys}).rowcount
        if len(batch) < size:
            return payloads, attempts
        after = (batch[-1]["settled"], batch[-1]["message_key"])
