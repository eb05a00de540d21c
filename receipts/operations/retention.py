"""Retention: what ``receipts prune`` may drop, and the SQL that drops it.

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
period from now.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from receipts.db import Connection, Database

# Stripe lets a person resend an event for 30 days; keep keys safely beyond.
MIN_KEEP_KEYS_DAYS = 35
DEFAULT_KEEP_KEYS_DAYS = 400
MIN_KEEP_DETAILS_DAYS = 1
DEFAULT_KEEP_DETAILS_DAYS = 30
DEFAULT_BATCH_SIZE = 5000

_SETTLED = "greatest(sent_at, created_at)"
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


def cutoffs(conn: Connection, policy: Policy) -> Cutoffs:
    """Both cutoffs from the database clock, so every process agrees on 'now'."""
    row = conn.execute("SELECT now() AS now").fetchone()
    assert row is not None
    now: datetime = row["now"]
    return Cutoffs(
        keys_before=now - timedelta(days=policy.keep_keys_days),
        details_before=now - timedelta(days=policy.keep_details_days),
    )


def count_prunable(conn: Connection, cut: Cutoffs) -> PruneCounts:
    """What :func:`prune` would drop now, changing nothing."""
    row = conn.execute(
        f"""SELECT
              (SELECT count(*) FROM stripe_events WHERE first_received_at < %(details)s)
                  AS events,
              (SELECT count(*) FROM resend_events
                WHERE received_at < %(details)s AND outcome <> 'unknown_email')
                  AS delivery_events,
              (SELECT count(*) FROM email_attempts WHERE message_key IN (
                  SELECT message_key FROM email_outbox
                   WHERE status = 'sent' AND {_SETTLED} < %(details)s)) AS attempts,
              (SELECT count(*) FROM email_outbox
                WHERE status = 'sent' AND {_SETTLED} < %(details)s
                  AND {_SETTLED} >= %(keys)s AND payload IS NOT NULL) AS payloads,
              (SELECT count(*) FROM email_outbox
                WHERE status = 'sent' AND {_SETTLED} < %(keys)s) AS receipts""",
        {"details": cut.details_before, "keys": cut.keys_before},
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
        row = conn.execute(
            "SELECT pg_relation_size('stripe_events') / current_setting('block_size')::int AS pages"
        ).fetchone()
    pages = int(row["pages"]) if row else 0
    dropped = 0
    for first in range(0, pages + 1, EVENT_PAGES_PER_BATCH):
        with database.transaction() as conn:
            dropped += conn.execute(
                """DELETE FROM stripe_events
                    WHERE ctid >= %s::tid AND ctid < %s::tid AND first_received_at < %s""",
                (f"({first},0)", f"({first + EVENT_PAGES_PER_BATCH},0)", cut.details_before),
            ).rowcount
    return dropped


def _drop_delivery_events_batch(conn: Connection, cut: Cutoffs, size: int) -> int:
    return conn.execute(
        """DELETE FROM resend_events WHERE svix_id IN (
               SELECT svix_id FROM resend_events
                WHERE received_at < %s AND outcome <> 'unknown_email' LIMIT %s)""",
        (cut.details_before, size),
    ).rowcount


def _drop_old_receipts(database: Database, cut: Cutoffs, size: int) -> tuple[int, int]:
    """Delete sent rows past the keys cutoff, with their attempts; (rows, attempts)."""
    rows = attempts = 0
    while True:
        with database.transaction() as conn:
            found = conn.execute(
                f"""WITH doomed AS (
                        SELECT message_key FROM email_outbox
                         WHERE status = 'sent' AND {_SETTLED} < %s
                         LIMIT %s FOR UPDATE SKIP LOCKED),
                    dropped_attempts AS (
                        DELETE FROM email_attempts a USING doomed d
                         WHERE a.message_key = d.message_key RETURNING 1),
                    dropped_rows AS (
                        DELETE FROM email_outbox o USING doomed d
                         WHERE o.message_key = d.message_key AND o.status = 'sent'
                        RETURNING 1)
                    SELECT (SELECT count(*) FROM dropped_rows) AS rows,
                           (SELECT count(*) FROM dropped_attempts) AS attempts""",
                (cut.keys_before, size),
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
                f"""SELECT message_key, {_SETTLED} AS settled FROM email_outbox
                     WHERE status = 'sent' AND {_SETTLED} < %(details)s
                       AND {_SETTLED} >= %(keys)s AND payload IS NOT NULL
                       AND (%(after_at)s::timestamptz IS NULL
                            OR ({_SETTLED}, message_key) > (%(after_at)s, %(after_key)s))
                     ORDER BY {_SETTLED}, message_key
                     LIMIT %(size)s FOR UPDATE""",
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
                attempts += conn.execute(
                    "DELETE FROM email_attempts WHERE message_key = ANY(%s)", (keys,)
                ).rowcount
                payloads += conn.execute(
                    """UPDATE email_outbox SET payload = NULL
                        WHERE message_key = ANY(%s) AND status = 'sent' AND payload IS NOT NULL""",
                    (keys,),
                ).rowcount
        if len(batch) < size:
            return payloads, attempts
        after = (batch[-1]["settled"], batch[-1]["message_key"])
