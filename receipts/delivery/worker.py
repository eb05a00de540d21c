"""The worker's dispatcher: claim ready receipts, hand them to senders, stop when told.

One dispatcher thread claims rows in batches (``receipts.delivery.claims``:
one statement, committed before any network call) and hands each to one of
``concurrency`` sender threads, which share one keep-alive HTTP session and
the send pace (``receipts.delivery.pacing``). A sender turns the provider's
answer into a decision (``receipts.delivery.decisions``: the whole answer
table, a pure function) and hands the result to the recorder
(``receipts.delivery.recorder``: batches, lease-guarded). In ``--loop`` mode
the listener (``receipts.delivery.listener``) wakes the dispatcher on NOTIFY.

Rows in hand (claimed, not yet recorded) each hold one slot of a semaphore
(``receipts.delivery.rows_in_hand``), sized so that the senders stay busy
and no row waits long enough for its lease to run out (one that would is
released unsent). A decision that stops the run (the provider refused our
configuration, or a quota in a drain run) stops new sends and claims; the
run returns its error and exit code (``receipts.delivery.summary.ExitCode``).
Before it claims, the dispatcher looks at the sending pause every worker
shares (``receipts.delivery.sending_pause``): a drain run that finds one
ends with exit code 4, a ``--loop`` worker waits it out. docs/architecture.md,
"Delivery: claim, send, record", describes the whole.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import psycopg

from receipts.config import ConfigError, Settings
from receipts.db import Connection, Database, DatabaseUnavailable, describe_error
from receipts.delivery import batches, claims
from receipts.delivery.configured import fleet_rate, send_rate
from receipts.delivery.first_render import payload_renderer
from receipts.delivery.fleet_pace import FleetPace
from receipts.delivery.listener import start_listener
from receipts.delivery.pacing import RateLimiter
from receipts.delivery.payload_check import payload_problem
from receipts.delivery.providers.base import Provider, batch_limit
from receipts.delivery.recorder import RECORDER_THREADS, Recorder
from receipts.delivery.rows_in_hand import RowsInHand, claim_sizing
from receipts.delivery.sender import Sender
from receipts.delivery.sending_pause import PauseGate
from receipts.delivery.summary import ExitCode, WorkerSummary
from receipts.logs import log_fields

log = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 8
DEFAULT_POLL_SECONDS = 5.0
# The longest one database borrow of the worker may take (a claim renders and
# freezes its rows in one transaction): past it the statement is cancelled, and a
# dead path cut (receipts.db), so a lock or a hung server cannot hold a cron run.
WORK_TIMEOUT_SECONDS = 30.0
# Never start a send unless it can finish (connect + read timeout) this long
# before the lease expires.
LEASE_SAFETY_SECONDS = 1.0


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
    clock: Callable[[], float] = time.monotonic,
) -> WorkerSummary:
    """Send ready receipts until none is ready (or, with ``loop``, until stopped).

    ``stop_event``, or ``max_seconds`` running out, ends the run gracefully:
    no new claims, rows being sent are finished, rows not yet sent are
    released. Safe to call from any thread; it installs no signal handlers.
    ``clock`` measures ``max_seconds``, how long a claimed row may wait for a
    send slot within its lease, and the send pace (a test passes a clock it
    moves itself); how often the database is polled is real time.
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
    worker = _Dispatcher(
        settings,
        provider,
        render=payload_renderer(settings),
        loop=loop,
        stop_event=stop_event or threading.Event(),
        concurrency=max(1, concurrency),
        max_seconds=max_seconds,
        poll_seconds=poll_seconds,
        worker_id=worker_id or default_worker_id(),
        clock=clock,
    )
    return worker.run()


def effective_batch_size(settings: Settings, provider: Provider) -> int:
    """Rows per request: ``RECEIPTS_BATCH_SIZE`` where the provider has a batch endpoint
    that takes that many, else 1 (Postmark, SMTP and the file sink send singly here)."""
    limit = batch_limit(provider)
    if settings.batch_size > 1 and settings.attach_pdf:
        # Every receipt carries its PDF, which no batch may: claiming batch-sized
        # numbers of single sends would only release most of them unsent.
        log_fields(
            log,
            "receipts carry their PDF and go singly; RECEIPTS_BATCH_SIZE is not used",
            logging.WARNING,
            batch_size=settings.batch_size,
        )
        return 1
    if settings.batch_size > 1 and limit < settings.batch_size:
        log_fields(
            log,
            "this provider sends one receipt per request; RECEIPTS_BATCH_SIZE is not used",
            logging.WARNING,
            provider=provider.name,
            batch_size=settings.batch_size,
        )
        return 1
    return settings.batch_size


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{threading.get_native_id()}:{uuid.uuid4().hex[:8]}"


class _Dispatcher:
    def __init__(
        self,
        settings: Settings,
        provider: Provider,
        *,
        render: claims.RenderPayload,
        loop: bool,
        stop_event: threading.Event,
        concurrency: int,
        max_seconds: float | None,
        poll_seconds: float,
        worker_id: str,
        clock: Callable[[], float],
    ) -> None:
        assert settings.database_url is not None
        self.database_url: str = settings.database_url
        self.settings = settings
        self.provider = provider
        self.render = render
        self.loop = loop
        self.stop_event = stop_event
        self.concurrency = concurrency
        self.max_seconds = max_seconds
        self.poll_seconds = poll_seconds
        self.worker_id = worker_id
        self.summary = WorkerSummary()
        self.clock = clock
        self.limiter = RateLimiter(send_rate(settings, provider), clock)
        send_budget = settings.provider_connect_timeout + settings.provider_timeout
        # How long a claimed row may wait for a send slot and still finish inside its lease.
        self.send_window = settings.lease_seconds - send_budget - LEASE_SAFETY_SECONDS
        self.batch_size = effective_batch_size(settings, provider)
        self.sizing = claim_sizing(
            concurrency=concurrency,
            send_window=self.send_window,
            send_budget=send_budget,
            sendable=self._sendable_within(self.send_window, fleet_rate(settings, provider)),
            per_request=self.batch_size,
        )
        self.rows = RowsInHand(self.sizing.capacity)
        self.database = Database(
            self.database_url,
            max_size=RECORDER_THREADS + 2,
            timeout=settings.database_timeout,
            work_timeout=WORK_TIMEOUT_SECONDS,
            prepared_statements=settings.prepared_statements,
        )
        self.recorder = Recorder(self.database, self.summary, self._let_go)
        self.halt = threading.Event()  # set on stop or on a fatal error: no new sends
        self.wake = threading.Event()  # look again: slots freed up, or a notification arrived
        self.notified = threading.Event()  # a NOTIFY said new rows may be ready
        self.gate = PauseGate(
            self.database,
            self.limiter,
            provider=provider.name,
            worker_id=worker_id,
            recheck_seconds=poll_seconds,
        )
        self.fleet = self._fleet_pace(send_rate(settings, provider))
        self.sender = Sender(
            settings=settings,
            provider=provider,
            limiter=self.limiter,
            gate=self.gate,
            recorder=self.recorder,
            summary=self.summary,
            halt=self.halt,
            loop=loop,
            send_window=self.send_window,
            let_go=self._let_go,
            worker_id=worker_id,
            fleet=self.fleet,
        )

    def _sendable_within(self, seconds: float, fleet_rate: float) -> int | None:
        """Requests this process may send in ``seconds``: at its own pace, and at most
        what the whole fleet may (None: no cap)."""
        own = self.limiter.sendable_within(seconds)
        if fleet_rate <= 0:
            return own
        fleet = max(1, int(seconds * fleet_rate))
        return fleet if own is None else min(own, fleet)

    def _fleet_pace(self, rate: float) -> FleetPace | None:
        """Sends are paced with every other worker process's unless they are uncapped."""
        if rate <= 0:
            return None
        return FleetPace(
            self.database,
            provider=self.provider.name,
            share=self.settings.send_share,
            limiter=self.limiter,
            clock=self.clock,
        )

    def run(self) -> WorkerSummary:
        started = self.clock()
        deadline = started + self.max_seconds if self.max_seconds is not None else None
        listener = None
        if self.loop:
            listener = start_listener(self.settings, self._notify, self.poll_seconds)
        log_fields(
            log,
            "worker started",
            worker=self.worker_id,
            provider=self.provider.name,
            concurrency=self.concurrency,
            loop=self.loop,
            send_interval=round(self.limiter.interval, 4),
            fleet_share=self.settings.send_share if self.fleet is not None else None,
            batch_size=self.batch_size,
        )
        self.recorder.start()
        try:
            with ThreadPoolExecutor(self.concurrency, thread_name_prefix="send") as senders:
                self._dispatch(senders, deadline)
        finally:
            self.recorder.close()
            if listener is not None:
                listener.stop()
            self.database.close()
            self.summary.seconds = self.clock() - started
        log_fields(
            log,
            "worker finished",
            worker=self.worker_id,
            sent=self.summary.sent,
            retried=self.summary.retried,
            rate_limited=self.summary.rate_limited,
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
            if self.notified.is_set():
                self.notified.clear()
                maybe_ready = True
            if self._sending_paused():
                continue
            pause = self.limiter.paused_for()
            if not self.loop and pause > self.poll_seconds and self.rows.none_in_hand():
                log_fields(
                    log,
                    "provider asked us to wait; leaving the rest to the next run",
                    logging.WARNING,
                    worker=self.worker_id,
                    wait_seconds=round(pause),
                )
                return
            poll_due = time.monotonic() - last_claim >= self.poll_seconds
            if pause == 0.0 and (maybe_ready or poll_due):
                # Claim only once enough slots are free (0 reserved: not yet).
                # Whole batches only: rows claimed past the last one would go singly.
                wanted = self.rows.reserve(
                    at_least=self.sizing.refill_at, multiple_of=self.batch_size
                )
            else:
                wanted = 0
            if wanted > 0:
                last_claim = time.monotonic()
                claim = self._claim(wanted)
                self.rows.give_back(wanted - (claim.in_hand if claim is not None else 0))
                if claim is None:
                    return
                self._hand_out(senders, claim)
                # Rows moved to review count too: they filled the claim.
                maybe_ready = claim.in_hand + len(claim.skipped) == wanted
                if not self.loop and not maybe_ready and self.rows.none_in_hand():
                    return  # drained: nothing ready, nothing in hand
            woken = self.wake.wait(timeout=min(0.25, pause) if pause else 0.25)
            # A drain run looks again when slots free up: rows may have become ready
            # meanwhile. A looping worker waits for a notification or the poll.
            maybe_ready = maybe_ready or (woken and not self.loop)

    def _hand_out(self, senders: ThreadPoolExecutor, claim: claims.Claim) -> None:
        """Each batch and each single row to a sender thread."""
        for batch in claim.batches:
            senders.submit(self.sender.attempt_batch, batch, self.clock())
        for row in claim.rows:
            senders.submit(self.sender.attempt, row, self.clock())

    def _sending_paused(self) -> bool:
        """A quota pause is in force: a drain run stops (exit 4), a loop waits and looks again."""
        pause = self.gate.current()
        if pause is None:
            return False
        if not self.loop:
            # A sender that got the quota answer says more (the HTTP answer): keep it.
            self.summary.stop(pause.line(), ExitCode.SENDING_PAUSED, unless_stopped=True)
            return True
        self.stop_event.wait(min(self.poll_seconds, max(0.05, pause.seconds_left)))
        return True

    def _should_stop_claiming(self, deadline: float | None) -> bool:
        out_of_time = deadline is not None and self.clock() >= deadline
        if out_of_time or self.stop_event.is_set() or self.summary.error is not None:
            self.halt.set()  # rows waiting for a sender slot are released unsent
            return True
        return False

    def _claim(self, limit: int) -> claims.Claim | None:
        """Claim up to ``limit`` rows; None when the database failed in drain mode."""
        try:
            # Autocommit: the claim is one statement, and a first claim's email
            # is frozen by a second one (see claims.claim_ready).
            with self.database.autocommit() as conn:
                claim = self._claim_rows(conn, limit)
        except psycopg.errors.InsufficientPrivilege as exc:
            # A role without the worker's grants: retrying cannot help.
            self.summary.stop(f"the database role lacks a privilege: {describe_error(exc)}", 2)
            return None
        except DatabaseUnavailable as exc:
            log_fields(log, "claim failed", logging.ERROR, worker=self.worker_id, error=str(exc))
            if not self.loop:
                self.summary.stop(f"database unavailable: {exc}", ExitCode.DATABASE)
                return None
            self.stop_event.wait(self.poll_seconds)
            return claims.Claim(rows=[], skipped=[])
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

    def _claim_rows(self, conn: Connection, limit: int) -> claims.Claim:
        """Live batches to send again first, then ready rows; with batches, the rows
        that may go out under a new key are grouped and stored as new batches."""
        resent: list[claims.ClaimedBatch] = []
        skipped: list[claims.SkippedRow] = []
        if self.batch_size > 1:
            resent, skipped = batches.claim_batches(
                conn,
                limit=limit // self.batch_size,
                worker_id=self.worker_id,
                lease_seconds=self.settings.lease_seconds,
                max_attempts=self.settings.max_attempts,
                retry_cutoff_hours=self.settings.retry_cutoff_hours,
                lease_expires=time.monotonic() + self.settings.lease_seconds,
            )
        claim = claims.claim_ready(
            conn,
            limit=limit - sum(len(batch.rows) for batch in resent),
            worker_id=self.worker_id,
            lease_seconds=self.settings.lease_seconds,
            max_attempts=self.settings.max_attempts,
            retry_cutoff_hours=self.settings.retry_cutoff_hours,
            render=self.render,
            look_up_past_limit=self.provider.guarantee.can_look_up,
        )
        formed: list[claims.ClaimedBatch] = []
        singles = claim.rows
        if self.batch_size > 1:
            formed, singles = batches.form_batches(
                conn,
                claim.rows,
                size=self.batch_size,
                provider=self.provider.name,
                worker_id=self.worker_id,
                sendable=self._sendable,
            )
        return claims.Claim(rows=singles, skipped=skipped + claim.skipped, batches=resent + formed)

    def _sendable(self, row: claims.ClaimedRow) -> bool:
        return payload_problem(row.message_key, row.payload, self.settings) is None

    def _notify(self) -> None:
        """The listener heard a NOTIFY: claim at once."""
        self.notified.set()
        self.wake.set()

    def _let_go(self) -> None:
        """One row fewer in hand (recorded, released, or given up on).

        The dispatcher is woken only when that can change what it does: enough
        slots are free for a claim, or (in a drain run) none is in hand, when
        the run may end. Waking it for every row cost a wake-up, and in a
        looping worker a claim that found nothing, per row.
        """
        free = self.rows.let_go()
        if free == self.sizing.refill_at or (not self.loop and free == self.rows.capacity):
            self.wake.set()
