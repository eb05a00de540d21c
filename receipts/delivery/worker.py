"""The worker: claim ready receipts, send each through the provider, record the answer.

One dispatcher thread claims rows (``FOR UPDATE SKIP LOCKED``, a fresh lease
token per row, committed before any network call) in batches, keeping at most
``concurrency`` rows waiting behind the ones being sent: the sender slots stay
busy, and no row waits long enough for its lease to run out (one that would
is released unsent). ``concurrency`` sender threads share one keep-alive HTTP
session, a send rate cap (``RECEIPTS_SEND_RATE``), and a pause that a 429 or
an exhausted rate-limit window sets for all of them. A sender hands each
answer to two recorder threads, which write whatever answers are waiting in
one transaction, each with ``WHERE lease_token = …``: a worker that lost its
lease writes nothing to the row and counts the loss.

What each provider answer does to the row (see DESIGN.md, "Outbox states"):

* accepted with an id → ``sent`` with ``provider_id`` and ``sent_at``;
* retry (timeout, connection error, 5xx, 429, 409 key in progress, 2xx
  without id) → ``pending`` again after a backoff: 15 s doubling per attempt,
  up to 1 h, half of it random jitter, never sooner than ``Retry-After``
  (which is itself capped at the 1 h bound);
* rejected (409 key reused with another body, other 4xx) → ``review`` with the
  provider's error name as ``review_reason``;
* unauthorized (401/403) → the row goes back to ``pending`` at once with the
  attempt refunded (the budget is for problems of the message, not of our
  API key), and the run stops with an error naming the problem.

Before every send, in the claim transaction, a row whose first attempt is
older than the retry cutoff, or whose attempt budget is spent, goes to
``review`` (``retry_window_elapsed`` / ``attempts_exhausted``) without a call.

``email_attempts.outcome`` values:

* NULL: in flight; left NULL with ``finished_at`` NULL when the worker died
  mid-attempt, an *ambiguous* attempt (the provider may have accepted it);
* ``sent``, ``retry``, ``review``: the provider's answer was recorded;
* ``lease_lost``: the answer came after another worker took the row over;
  the row was not touched (``http_status`` / ``provider_id`` still say what
  the provider answered);
* ``config_error``: 401/403; the row was released and the attempt refunded;
* ``released``: claimed but not sent (shutdown, or the lease would have run
  out while waiting for the rate limit); attempt refunded;
* ``skipped_cutoff``, ``skipped_budget``: the row went to review at claim
  time without a call (its ``attempt`` is the one that was not made).

A refunded attempt keeps its log row, so the next claim reuses its number.
"""

from __future__ import annotations

import logging
import queue
import random
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Literal

import psycopg

from receipts import queries
from receipts.config import ConfigError, Settings
from receipts.db import Database, DatabaseUnavailable, connect, describe_error
from receipts.delivery import claims as outbox
from receipts.delivery.providers import FileSinkProvider, Provider, ProviderAnswer, ResendProvider
from receipts.logs import log_fields

log = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 8
DEFAULT_POLL_SECONDS = 5.0
# A 429 without any header telling us how long to wait pauses sends this long.
DEFAULT_RATE_LIMIT_PAUSE = 1.0
# Never start a send unless it can finish (connect + read timeout) this long
# before the lease expires.
LEASE_SAFETY_SECONDS = 1.0
# Rows claimed ahead of a free sender slot, at least.
PREFETCH = 32
# Threads writing answers to the database, and the most answers one transaction holds.
RECORDER_THREADS = 2
RECORD_BATCH = 64

Counter = Literal["sent", "retried", "review", "lease_lost", "released", "unrecorded"]


@dataclass(kw_only=True)
class WorkerSummary:
    """What one run did; ``error`` is set when the run stopped on a problem."""

    sent: int = 0
    retried: int = 0
    review: int = 0
    lease_lost: int = 0
    released: int = 0
    unrecorded: int = 0
    seconds: float = 0.0
    error: str | None = None
    exit_code: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count(self, counter: Counter, amount: int = 1) -> None:
        with self._lock:
            setattr(self, counter, getattr(self, counter) + amount)

    def line(self) -> str:
        return (
            f"sent={self.sent} retried={self.retried} review={self.review} "
            f"lease_lost={self.lease_lost} released={self.released} "
            f"unrecorded={self.unrecorded} seconds={self.seconds:.2f}"
        )


def provider_from_settings(settings: Settings, *, concurrency: int) -> Provider:
    """Resend when RESEND_API_KEY is set, else the file sink if RECEIPTS_MAIL_DIR is."""
    if settings.resend_api_key:
        return ResendProvider(
            api_url=settings.resend_api_url,
            api_key=settings.resend_api_key,
            connect_timeout=settings.provider_connect_timeout,
            read_timeout=settings.provider_timeout,
            pool_size=concurrency,
        )
    if settings.mail_dir is not None:
        return FileSinkProvider(settings.mail_dir)
    raise ConfigError(
        "RESEND_API_KEY",
        "is required to send email (or set RECEIPTS_MAIL_DIR for the local .eml mail sink)",
    )


def run_worker(
    settings: Settings,
    provider: Provider,
    *,
    loop: bool = False,
    stop_event: threading.Event | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    max_seconds: float | None = None,
    poll_seconds: float = DEFAULT_POLL_SECONDS,
    worker_id: str | None = None,
) -> WorkerSummary:
    """Send ready receipts until none is ready (or, with ``loop``, until stopped).

    ``stop_event``, or ``max_seconds`` running out, ends the run gracefully:
    no new claims, rows being sent are finished, rows not yet sent are
    released. Safe to call from any thread; it installs no signal handlers.
    """
    if settings.database_url is None:
        raise ConfigError("DATABASE_URL", "is required but not set")
    send_budget = settings.provider_connect_timeout + settings.provider_timeout
    if settings.lease_seconds <= send_budget + LEASE_SAFETY_SECONDS:
        raise ConfigError(
            "RECEIPTS_LEASE_SECONDS",
            f"must exceed the provider connect + read timeouts ({send_budget:g} s) "
            f"by more than {LEASE_SAFETY_SECONDS:g} s",
        )
    worker = _Worker(
        settings,
        provider,
        loop=loop,
        stop_event=stop_event or threading.Event(),
        concurrency=max(1, concurrency),
        max_seconds=max_seconds,
        poll_seconds=poll_seconds,
        worker_id=worker_id or default_worker_id(),
    )
    return worker.run()


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{threading.get_native_id()}:{uuid.uuid4().hex[:8]}"


def retry_delay(
    attempt: int,
    *,
    base: float,
    cap: float,
    retry_after: float | None = None,
    rng: random.Random | None = None,
) -> float:
    """Seconds until the next try: doubling per attempt, half jitter, Retry-After honoured."""
    exponential = min(cap, base * 2.0 ** max(0, attempt - 1))
    jittered = exponential / 2.0 + (rng or random).uniform(0.0, exponential / 2.0)
    return min(cap, max(jittered, retry_after or 0.0))


class RateLimiter:
    """Spaces sends to ``rate`` per second (0 = no cap) and pauses them after a 429."""

    def __init__(self, rate: float) -> None:
        self._interval = 1.0 / rate if rate > 0 else 0.0
        self._next_slot = 0.0
        self._paused_until = 0.0
        self._lock = threading.Lock()

    def pause(self, seconds: float) -> None:
        with self._lock:
            self._paused_until = max(self._paused_until, time.monotonic() + seconds)

    def paused_for(self) -> float:
        with self._lock:
            return max(0.0, self._paused_until - time.monotonic())

    def acquire(self, deadline: float, halt: threading.Event) -> bool:
        """Wait for a send slot; False if none comes before ``deadline`` or on halt."""
        while not halt.is_set():
            with self._lock:
                now = time.monotonic()
                start = max(now, self._next_slot, self._paused_until)
                if start > deadline:
                    return False
                if start <= now:
                    self._next_slot = now + self._interval
                    return True
            halt.wait(min(start - now, 0.25))
        return False

    def sendable_within(self, seconds: float) -> int | None:
        """How many sends fit into ``seconds`` at the capped rate (None: no cap)."""
        if self._interval == 0.0:
            return None
        return max(1, int(seconds / self._interval))


class _Worker:
    def __init__(
        self,
        settings: Settings,
        provider: Provider,
        *,
        loop: bool,
        stop_event: threading.Event,
        concurrency: int,
        max_seconds: float | None,
        poll_seconds: float,
        worker_id: str,
    ) -> None:
        assert settings.database_url is not None
        self.settings = settings
        self.provider = provider
        self.loop = loop
        self.stop_event = stop_event
        self.concurrency = concurrency
        self.max_seconds = max_seconds
        self.poll_seconds = poll_seconds
        self.worker_id = worker_id
        self.summary = WorkerSummary()
        self.limiter = RateLimiter(settings.send_rate)
        # Answers waiting to be written, taken in batches by the recorder threads.
        self.answers: queue.SimpleQueue[_Answered | None] = queue.SimpleQueue()
        self.database = Database(
            settings.database_url,
            max_size=RECORDER_THREADS + 2,
            timeout=settings.database_timeout,
        )
        self.send_budget = settings.provider_connect_timeout + settings.provider_timeout
        self.halt = threading.Event()  # set on stop or on a fatal error: no new sends
        self.wake = threading.Event()  # a slot freed up, or a notification arrived
        self.finished = threading.Event()
        self._held = 0
        self._held_lock = threading.Lock()

    # --- the dispatcher -----------------------------------------------------------

    def run(self) -> WorkerSummary:
        started = time.monotonic()
        deadline = started + self.max_seconds if self.max_seconds is not None else None
        listener = self._start_listener() if self.loop else None
        log_fields(
            log,
            "worker started",
            worker=self.worker_id,
            provider=self.provider.name,
            concurrency=self.concurrency,
            loop=self.loop,
        )
        recorders = [
            threading.Thread(target=self._record_answers, name=f"record-{n}", daemon=True)
            for n in range(RECORDER_THREADS)
        ]
        for recorder in recorders:
            recorder.start()
        try:
            with ThreadPoolExecutor(self.concurrency, thread_name_prefix="send") as senders:
                self._dispatch(senders, deadline)
        finally:
            for _ in recorders:
                self.answers.put(None)
            for recorder in recorders:
                recorder.join()
            self.finished.set()
            if listener is not None:
                listener.join(timeout=2.0)
            self.database.close()
            self.summary.seconds = time.monotonic() - started
        log_fields(
            log,
            "worker finished",
            worker=self.worker_id,
            sent=self.summary.sent,
            retried=self.summary.retried,
            review=self.summary.review,
            lease_lost=self.summary.lease_lost,
            released=self.summary.released,
            error=self.summary.error,
        )
        return self.summary

    def _dispatch(self, senders: ThreadPoolExecutor, deadline: float | None) -> None:
        maybe_ready = True
        last_claim = 0.0
        while not self._should_stop_claiming(deadline):
            self.wake.clear()
            pause = self.limiter.paused_for()
            if not self.loop and self._held == 0 and pause > self.poll_seconds:
                log_fields(
                    log,
                    "provider asked us to wait; leaving the rest to the next run",
                    logging.WARNING,
                    worker=self.worker_id,
                    wait_seconds=round(pause),
                )
                return
            wanted = self._claim_size()
            poll_due = time.monotonic() - last_claim >= self.poll_seconds
            if wanted > 0 and pause == 0.0 and (maybe_ready or poll_due):
                last_claim = time.monotonic()
                claim = self._claim(wanted)
                if claim is None:
                    return
                for row in claim.rows:
                    self._start(senders, row)
                # Rows moved to review count too: they filled the claim.
                maybe_ready = len(claim.rows) + len(claim.skipped) == wanted
                if not self.loop and self._held == 0 and not maybe_ready:
                    return  # drained: nothing ready, nothing in hand
            waited = self.wake.wait(timeout=min(0.25, pause) if pause else 0.25)
            maybe_ready = maybe_ready or waited

    def _claim_size(self) -> int:
        """How many rows to claim now: 0 while enough are in hand.

        A few rows wait in memory behind the ones being sent (``PREFETCH``,
        or ``concurrency`` if more), so a slot that frees up finds its next
        row at once; claiming again only when half of them are used keeps the
        claim queries few. A waiting row is sent within a few send times, far
        inside its lease; with a rate cap, never more are held than can be
        sent before the leases run out.
        """
        # Even if every send took its full timeout, a waiting row starts in time.
        rounds_within_lease = int(self._send_window() // self.send_budget)
        prefetch = min(max(PREFETCH, self.concurrency), self.concurrency * rounds_within_lease)
        capacity = self.concurrency + prefetch
        fit = self.limiter.sendable_within(self._send_window())
        if fit is not None:
            capacity = min(capacity, fit)
        if self._held > capacity - max(1, prefetch // 2):
            return 0
        return capacity - self._held

    def _should_stop_claiming(self, deadline: float | None) -> bool:
        out_of_time = deadline is not None and time.monotonic() >= deadline
        if out_of_time or self.stop_event.is_set() or self.summary.error is not None:
            self.halt.set()  # rows waiting for a sender slot are released unsent
            return True
        return False

    def _claim(self, limit: int) -> outbox.Claim | None:
        """Claim up to ``limit`` rows; None when the database failed in drain mode."""
        try:
            with self.database.transaction() as conn:
                claim = outbox.claim_ready(
                    conn,
                    limit=limit,
                    worker_id=self.worker_id,
                    lease_seconds=self.settings.lease_seconds,
                    max_attempts=self.settings.max_attempts,
                    retry_cutoff_hours=self.settings.retry_cutoff_hours,
                )
        except DatabaseUnavailable as exc:
            log_fields(log, "claim failed", logging.ERROR, worker=self.worker_id, error=str(exc))
            if not self.loop:
                self.summary.error = f"database unavailable: {exc}"
                self.summary.exit_code = 3
                return None
            self.stop_event.wait(self.poll_seconds)
            return outbox.Claim(rows=[], skipped=[])
        for skipped in claim.skipped:
            self.summary.count("review")
            log_fields(
                log,
                "receipt to review without sending",
                logging.WARNING,
                key=skipped.message_key,
                reason=skipped.review_reason,
            )
        return claim

    def _send_window(self) -> float:
        return self.settings.lease_seconds - self.send_budget - LEASE_SAFETY_SECONDS

    def _start(self, senders: ThreadPoolExecutor, row: outbox.ClaimedRow) -> None:
        with self._held_lock:
            self._held += 1
        senders.submit(self._attempt, row, time.monotonic())

    # --- one attempt, on a sender thread ------------------------------------------

    def _attempt(self, row: outbox.ClaimedRow, claimed_at: float) -> None:
        """Send one row; a recorder thread writes the answer, so this slot is free at once."""
        try:
            send_by = claimed_at + self._send_window()
            if self.halt.is_set() or not self.limiter.acquire(send_by, self.halt):
                self.answers.put((row, _RELEASED))
                return
            answer = self.provider.send(row.message_key, row.payload)
            self._react_to_limits(answer)
            self.answers.put((row, self._result_for(row, answer)))
        except Exception:
            # The lease expires and another run retries with the same key.
            log.exception("attempt failed unexpectedly: key=%s", row.message_key)
            self.summary.count("unrecorded")
            self._let_go()

    def _let_go(self) -> None:
        """One row fewer in hand (sent and recorded, or released)."""
        with self._held_lock:
            self._held -= 1
        self.wake.set()

    def _react_to_limits(self, answer: ProviderAnswer) -> None:
        if answer.http_status == 429:
            wait = answer.retry_after or answer.rate_limit_reset or DEFAULT_RATE_LIMIT_PAUSE
            self.limiter.pause(wait)
        elif answer.rate_limit_remaining == 0 and answer.rate_limit_reset:
            self.limiter.pause(answer.rate_limit_reset)

    def _result_for(self, row: outbox.ClaimedRow, answer: ProviderAnswer) -> outbox.AttemptResult:
        answered = outbox.AttemptResult(
            status="pending",
            outcome="retry",
            http_status=answer.http_status,
            provider_error=answer.error,
            provider_id=answer.provider_id,
            last_error=answer.error,
        )
        if answer.kind == "accepted":
            return replace(answered, status="sent", outcome="sent", last_error=None)
        if answer.kind == "rejected":
            reason = answer.error or "provider_rejected"
            return replace(answered, status="review", outcome="review", review_reason=reason)
        if answer.kind == "unauthorized":
            self.summary.error = (
                f"the provider refused our credentials (HTTP {answer.http_status} "
                f"{answer.error}): check RESEND_API_KEY and the sender domain"
            )
            self.summary.exit_code = 2
            self.halt.set()
            return replace(answered, outcome="config_error", refund_attempt=True)
        delay = retry_delay(
            row.attempt,
            base=self.settings.retry_base_seconds,
            cap=self.settings.retry_max_seconds,
            retry_after=answer.retry_after,
        )
        return replace(answered, retry_in_seconds=delay)

    # --- recording answers, on a recorder thread ----------------------------------

    def _record_answers(self) -> None:
        """Write answers in batches, one transaction (one WAL flush) per batch."""
        while True:
            first = self.answers.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < RECORD_BATCH:
                try:
                    more = self.answers.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self.answers.put(None)  # leave the stop marker for this thread's next get
                    break
                batch.append(more)
            self._record_batch(batch)

    def _record_batch(self, batch: list[_Answered]) -> None:
        # In key order, so two workers writing overlapping batches (possible
        # only after lost leases) lock rows in the same order: no deadlock.
        batch.sort(key=lambda answered: answered[0].message_key)
        try:
            try:
                with self.database.transaction() as conn:
                    held = outbox.record_attempts(conn, batch)
            except (DatabaseUnavailable, psycopg.Error) as exc:
                self.summary.count("unrecorded", len(batch))
                log_fields(
                    log,
                    "could not record attempts; their leases will expire and they are retried",
                    logging.ERROR,
                    keys=",".join(row.message_key for row, _ in batch),
                    error=describe_error(exc),
                )
                return
            for (row, result), still_held in zip(batch, held, strict=True):
                self._report(row, result, still_held)
        finally:
            for _ in batch:
                self._let_go()

    def _report(self, row: outbox.ClaimedRow, result: outbox.AttemptResult, held: bool) -> None:
        if not held:
            self.summary.count("lease_lost")
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
        self.summary.count(_COUNTERS[result.outcome])
        log_fields(
            log,
            "attempt recorded",
            logging.INFO if result.outcome == "sent" else logging.WARNING,
            key=row.message_key,
            attempt=row.attempt,
            outcome=result.outcome,
            http_status=result.http_status,
            provider_id=result.provider_id,
            error=result.provider_error,
            retry_in=round(result.retry_in_seconds, 1) if result.status == "pending" else None,
        )

    # --- wake-ups -----------------------------------------------------------------

    def _start_listener(self) -> threading.Thread:
        listener = threading.Thread(target=self._listen, name="listen", daemon=True)
        listener.start()
        return listener

    def _listen(self) -> None:
        """Turn NOTIFYs into wake-ups; polling covers whatever this misses."""
        assert self.settings.database_url is not None
        while not self.finished.is_set():
            try:
                with connect(self.settings.database_url, autocommit=True) as conn:
                    conn.execute(queries.load("delivery")["listen"])
                    self.wake.set()  # rows may have arrived while we were not listening
                    while not self.finished.is_set():
                        for _ in conn.notifies(timeout=0.5):
                            self.wake.set()
            except (DatabaseUnavailable, psycopg.Error) as exc:
                log_fields(
                    log,
                    "listen connection lost; polling meanwhile",
                    logging.WARNING,
                    error=describe_error(exc),
                )
                self.finished.wait(self.poll_seconds)


_COUNTERS: dict[str, Counter] = {
    "sent": "sent",
    "retry": "retried",
    "review": "review",
    "config_error": "released",
    "released": "released",
}


_Answered = tuple[outbox.ClaimedRow, outbox.AttemptResult]

# Claimed but not sent (shutdown, or no send slot before the lease would end).
_RELEASED = outbox.AttemptResult(status="pending", outcome="released", refund_attempt=True)
