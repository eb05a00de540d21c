"""Answers written to the database in batches, each only where the lease still holds.

A sender hands its row's :class:`~receipts.delivery.decisions.AttemptResult`
to :meth:`Recorder.put` and is free at once. The recorder thread takes
whatever answers are waiting (up to :data:`RECORD_BATCH`) and writes them
with one autocommit statement (``delivery.sql: record_attempts``, atomic on
its own): one round trip and one WAL flush for many answers, as River's job
completer does. One thread, because answers that arrive while it writes
make the next batch larger, not another round trip; and when answers
trickle in (a looping worker at a steady rate), the first of a batch waits
up to :data:`RECORD_LINGER_SECONDS` for company, so that a statement writes
several. The send has happened by then: the wait delays only the row's
``sent`` in the database, never an email. Each row is written only
``WHERE lease_token = …``: a worker that lost its lease writes nothing to the
row and counts the loss. A batch that cannot be written leaves its rows
leased, so it is tried again (after 0.25 s, 0.5 s, 1 s… at most
:data:`RECORD_RETRY_MAX_SECONDS` apart) for as long as every lease in it holds
with :data:`LEASE_MARGIN_SECONDS` to spare: a database blip must not turn
answers the provider already gave into sends after the lease. Past that, the
rows are claimed again when their leases expire. docs/architecture.md,
"Delivery: claim, send, record", describes the record.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

import psycopg

from receipts.db import Database, DatabaseUnavailable, describe_error
from receipts.delivery import claims
from receipts.delivery.decisions import AttemptResult
from receipts.delivery.summary import Counter, WorkerSummary
from receipts.logs import log_fields
from receipts.vocabulary import AttemptOutcome, RowStatus

log = logging.getLogger(__name__)

# Threads writing answers to the database, and the most answers one statement holds.
RECORDER_THREADS = 1
RECORD_BATCH = 64
# How long the first answer of a batch waits for more before it is written.
RECORD_LINGER_SECONDS = 0.02
# A batch the database failed is written again until this long before its first lease ends.
LEASE_MARGIN_SECONDS = 2.0
RECORD_RETRY_FIRST_SECONDS = 0.25
RECORD_RETRY_MAX_SECONDS = 5.0

Answered = tuple[claims.ClaimedRow, AttemptResult]

_COUNTERS: dict[str, Counter] = {
    AttemptOutcome.SENT: "sent",
    AttemptOutcome.RETRY: "retried",
    AttemptOutcome.RATE_LIMITED: "rate_limited",
    AttemptOutcome.REVIEW: "review",
    AttemptOutcome.CONFIG_ERROR: "released",
    AttemptOutcome.QUOTA_EXCEEDED: "released",
    AttemptOutcome.RELEASED: "released",
    # A row past its limits that the provider did not have: to review unsent.
    AttemptOutcome.SKIPPED_CUTOFF: "review",
    AttemptOutcome.SKIPPED_BUDGET: "review",
}


class Recorder:
    """The answer queue and the threads that drain it into the database.

    ``let_go`` is called once per answer after its batch was written (or
    failed): the row is no longer in the worker's hands.
    """

    def __init__(
        self,
        database: Database,
        summary: WorkerSummary,
        let_go: Callable[[], None],
        *,
        threads: int = RECORDER_THREADS,
        batch_size: int = RECORD_BATCH,
        linger: float = RECORD_LINGER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._database = database
        self._summary = summary
        self._let_go = let_go
        self._batch_size = batch_size
        self._linger = linger
        self._clock = clock
        self._sleep = sleep
        self._answers: queue.SimpleQueue[Answered | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._record_answers, name=f"record-{n}", daemon=True)
            for n in range(threads)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def put(self, row: claims.ClaimedRow, result: AttemptResult) -> None:
        """Queue one answer; it is written with whatever else is waiting."""
        self._answers.put((row, result))

    def close(self) -> None:
        """Write every answer already queued, then stop the threads."""
        for _ in self._threads:
            self._answers.put(None)
        for thread in self._threads:
            thread.join()

    def _record_answers(self) -> None:
        """Write answers in batches, one statement (one WAL flush) per batch."""
        stopping = False
        while not stopping:
            first = self._answers.get()
            if first is None:
                return
            batch, stopping = self._gather(first)
            self._record_batch(batch)

    def _gather(self, first: Answered) -> tuple[list[Answered], bool]:
        """``first`` and what arrives within the linger, up to a batch; True: stop after it."""
        batch = [first]
        until = time.monotonic() + self._linger
        while len(batch) < self._batch_size:
            try:
                more = self._answers.get(timeout=max(0.0, until - time.monotonic()))
            except queue.Empty:
                break
            if more is None:
                return batch, True
            batch.append(more)
        return batch, False

    def _record_batch(self, batch: list[Answered]) -> None:
        # In key order, so two workers writing overlapping batches (possible
        # only after lost leases) lock rows in the same order: no deadlock.
        batch.sort(key=lambda answered: answered[0].message_key)
        try:
            held = self._write_while_leased(batch)
            if held is None:
                return
            for (row, result), still_held in zip(batch, held, strict=True):
                self._report(row, result, still_held)
        finally:
            for _ in batch:
                self._let_go()

    def _write_while_leased(self, batch: list[Answered]) -> list[bool] | None:
        """Which rows were still held, once the batch is written; None if it never was."""
        last_chance = min(row.lease_expires for row, _ in batch) - LEASE_MARGIN_SECONDS
        delay = RECORD_RETRY_FIRST_SECONDS
        while True:
            try:
                # One statement, atomic on its own: no BEGIN and COMMIT round trips.
                with self._database.autocommit() as conn:
                    return claims.record_attempts(conn, batch)
            except (DatabaseUnavailable, psycopg.Error) as exc:
                error = describe_error(exc)
            keys = ",".join(row.message_key for row, _ in batch)
            if self._clock() + delay >= last_chance:
                self._summary.count("unrecorded", len(batch))
                log_fields(log, "could not record attempts; their leases will expire and "
                           "they are retried", logging.ERROR, keys=keys, error=error)  # fmt: skip
                return None
            self._summary.count("record_retries")
            log_fields(log, "could not record attempts; trying again while the leases hold",
                       logging.WARNING, keys=keys, error=error, retry_in=delay)  # fmt: skip
            self._sleep(delay)
            delay = min(delay * 2, RECORD_RETRY_MAX_SECONDS)

    def _report(self, row: claims.ClaimedRow, result: AttemptResult, held: bool) -> None:
        if not held:
            self._summary.count("lease_lost")
            log_fields(
                log,
                "lease lost before recording; row left to its new holder",
                logging.WARNING,
                key=row.message_key,
                attempt=row.attempt,
                http_status=result.http_status,
                provider_id=result.provider_id,
            )
            return
        self._summary.count(_COUNTERS[result.outcome])
        log_fields(
            log,
            "attempt recorded",
            logging.INFO if result.outcome == AttemptOutcome.SENT else logging.WARNING,
            key=row.message_key,
            attempt=row.attempt,
            outcome=result.outcome,
            http_status=result.http_status,
            provider_id=result.provider_id,
            error=result.provider_error,
            retry_in=round(result.retry_in_seconds, 1)
            if result.status == RowStatus.PENDING
            else None,
        )
