"""One attempt, on a sender thread: wait for a slot, send, decide, hand the result on.

:class:`Sender` is what the dispatcher (``receipts.delivery.worker``) runs on
each of its sender threads. It asks the pace (``receipts.delivery.pacing``)
for a slot, sends the frozen payload, turns the answer into a decision
(``receipts.delivery.decisions``) and acts on what the decision says beyond
the row: it pauses every send of the worker (and logs the wait, and its cut
when the provider asked for more than the cap), follows the provider's rate
limit, records a quota pause for every worker (``receipts.delivery.
sending_pause``), and stops the run on a configuration error or, in a drain
run, on a quota. The row's result goes to the recorder, so the thread is
free at once. docs/architecture.md, "Delivery: claim, send, record".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from receipts.config import Settings
from receipts.delivery import batches, claims, lookups
from receipts.delivery.decisions import RELEASED, AttemptResult, Decision, decide
from receipts.delivery.fleet_pace import FleetPace
from receipts.delivery.pacing import RateLimiter
from receipts.delivery.payload_check import payload_problem
from receipts.delivery.providers.base import BatchProvider, Provider
from receipts.delivery.recorder import Recorder
from receipts.delivery.sending_pause import PauseGate, describe_reason
from receipts.delivery.summary import ExitCode, WorkerSummary
from receipts.formatting import utc
from receipts.logs import log_fields
from receipts.vocabulary import AttemptOutcome, ReviewReason, RowStatus

log = logging.getLogger(__name__)

# A provider's clock and ours may differ: a lookup reaches back this much
# before the first attempt (Resend's sent list is searched back to there).
LOOKUP_MARGIN = timedelta(minutes=1)


def _not_ours(row: claims.ClaimedRow, problem: str) -> AttemptResult:
    """A frozen email the product did not write: to review, nothing sent."""
    log_fields(log, "frozen email refused: not what the product writes", logging.ERROR,
               key=row.message_key, problem=problem)  # fmt: skip
    return AttemptResult(
        status=RowStatus.REVIEW,
        outcome=AttemptOutcome.REVIEW,
        refund_attempt=True,
        review_reason=ReviewReason.PAYLOAD_NOT_OURS,
        last_error=problem,
    )


@dataclass(kw_only=True)
class Sender:
    settings: Settings
    provider: Provider
    limiter: RateLimiter
    gate: PauseGate
    recorder: Recorder
    summary: WorkerSummary
    halt: threading.Event  # set: no new sends (stop, or a fatal answer)
    loop: bool
    send_window: float  # seconds a claimed row may wait for a slot and still finish in its lease
    let_go: Callable[[], None]
    worker_id: str
    fleet: FleetPace | None = None  # the pace every worker process shares, if the limit is known

    def _slot(self, send_by: float) -> bool:
        """This process's pace, then the fleet's: False when no slot comes by ``send_by``."""
        if not self.limiter.acquire(send_by, self.halt):
            return False
        return self.fleet is None or self.fleet.acquire(send_by, self.halt)

    def attempt(self, row: claims.ClaimedRow, claimed_at: float) -> None:
        """Send one row; the recorder writes the answer, so this slot is free at once.

        First the row's plan (``receipts.delivery.lookups``): an earlier attempt
        that may have been accepted is asked about (Postmark, or any provider
        that can be asked once the row is past its limits), waited for, or
        handed to a person (SMTP) instead of being sent again."""
        try:
            send_by = claimed_at + self.send_window
            if self.halt.is_set():
                self.recorder.put(row, RELEASED)
                return
            problem = payload_problem(row.message_key, row.payload, self.settings)
            if problem is not None:
                self.recorder.put(row, _not_ours(row, problem))
                return
            chosen = lookups.plan(row, self.provider.guarantee)
            if chosen.step in (lookups.Step.WAIT, lookups.Step.REVIEW):
                self._log_plan(row, chosen)
                self.recorder.put(row, lookups.without_sending(row, chosen))
                return
            if chosen.step == lookups.Step.LOOK_UP:
                result = self._look_up(row, send_by)
                if result is not None:
                    self.recorder.put(row, result)
                    return
            if not self._slot(send_by):
                self.recorder.put(row, RELEASED)
                return
            answer = self.provider.send(row.message_key, row.payload)
            decision = decide(
                answer,
                row.attempt,
                self.settings,
                now=datetime.now(UTC),
                table=self.provider.answers,
            )
            self._act_on(decision)
            self.recorder.put(row, decision.result)
        except Exception:
            # The lease expires and another run retries with the same key.
            log.exception("attempt failed unexpectedly: key=%s", row.message_key)
            self.summary.count("unrecorded")
            self.let_go()

    def attempt_batch(self, batch: claims.ClaimedBatch, claimed_at: float) -> None:
        """Send one batch in one request (``receipts.delivery.batches``): the same body
        under the same key on every attempt; each member's answer goes to the recorder."""
        try:
            if self.halt.is_set():
                self._put_all(batch, RELEASED)
                return
            if batch.body is None:
                self._put_all(batch, batches.body_changed(batch))
                return
            if not self._slot(claimed_at + self.send_window):
                self._put_all(batch, RELEASED)
                return
            assert isinstance(self.provider, BatchProvider)
            answered = self.provider.send_batch(batch.batch_key, batch.body, batch.size)
            decision, results = batches.batch_decision(
                answered,
                batch,
                self.settings,
                now=datetime.now(UTC),
                table=self.provider.answers,
            )
            self._act_on(decision)
            for row, result in zip(batch.rows, results, strict=True):
                self.recorder.put(row, result)
        except Exception:
            # The leases expire and another run sends the same batch with the same key.
            log.exception("batch attempt failed unexpectedly: batch=%s", batch.batch_key)
            self.summary.count("unrecorded", len(batch.rows))
            for _ in batch.rows:
                self.let_go()

    def _put_all(self, batch: claims.ClaimedBatch, result: AttemptResult) -> None:
        for row in batch.rows:
            self.recorder.put(row, result)

    def _look_up(self, row: claims.ClaimedRow, send_by: float) -> AttemptResult | None:
        """Ask the provider (or the recorded webhooks) whether it has this receipt;
        the attempt's result, or None when it does not and the send goes ahead."""
        found = lookups.evidence_lookup(row)
        if found is None:
            if not self._slot(send_by):
                return RELEASED
            started = row.first_attempt_at or datetime.now(UTC)
            found = self.provider.look_up(
                row.message_key,
                row.payload,
                since=started - LOOKUP_MARGIN,
                deadline=send_by,
            )
        log_fields(
            log,
            "asked the provider about an earlier attempt",
            logging.INFO if found.error is None else logging.WARNING,
            key=row.message_key,
            searched=found.searched,
            found=found.provider_id,
            error=found.error,
        )
        stop = lookups.run_stop(found)
        if stop is not None:
            self._stop(stop.error, stop.exit_code)
        return lookups.after_lookup(row, found, self.settings)

    def _log_plan(self, row: claims.ClaimedRow, chosen: lookups.Plan) -> None:
        if chosen.step == lookups.Step.WAIT:
            message = "waiting until the provider's search can see an earlier attempt"
        else:
            message = "receipt to review without sending: an earlier attempt may have arrived"
        log_fields(
            log,
            message,
            logging.WARNING,
            key=row.message_key,
            wait_seconds=round(chosen.wait_seconds, 1) if chosen.wait_seconds else None,
            reason=chosen.review_reason,
        )

    def _act_on(self, decision: Decision) -> None:
        """What the answer means beyond its row: the pace, the pause, the run."""
        if decision.provider_rate is not None:
            self.limiter.follow_provider_rate(decision.provider_rate)
        if self.fleet is not None:
            self.fleet.heard(
                limit_per_second=decision.provider_rate, pause_seconds=decision.pause_sends
            )
        if decision.pause_sends and self.limiter.pause(decision.pause_sends):
            log_fields(
                log,
                "provider asked us to wait; every send pauses",
                logging.WARNING,
                worker=self.worker_id,
                http_status=decision.result.http_status,
                error=decision.result.provider_error,
                asked_seconds=_rounded(decision.asked_pause),
                pause_seconds=round(decision.pause_sends, 3),
                capped=decision.asked_pause > decision.pause_sends or None,
            )
        if decision.quota is not None:
            pause = self.gate.record(decision.quota)
            if not self.loop:
                until = time.time() + decision.quota.seconds
                line = (
                    pause.line()
                    if pause is not None
                    else f"sending paused: {describe_reason(decision.quota.reason)} until "
                    f"{utc(datetime.fromtimestamp(until, UTC))} (not recorded for other workers)"
                )
                self._stop(f"{line} (HTTP 429 {decision.quota.reason})", ExitCode.SENDING_PAUSED)
        if decision.stop is not None:
            self._stop(decision.stop.error, decision.stop.exit_code)

    def _stop(self, error: str, exit_code: int) -> None:
        self.summary.stop(error, exit_code)
        self.halt.set()


def _rounded(seconds: float) -> float | str:
    return "inf" if seconds == float("inf") else round(seconds, 3)
