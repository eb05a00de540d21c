"""Before a send: was an earlier attempt of this receipt perhaps accepted, and if so, ask.

An attempt *may hide an accepted send* when nothing says it was not: its
worker died or lost its lease before writing the answer, or it ended in a
retry after no reply, a 5xx or a 2xx without an id. What the next attempt
does about it depends on the provider's guarantee (:func:`plan`):

* an idempotency key (Resend, the ``.eml`` sink): send again with the key,
  inside its window; the provider replays its first answer;
* a search (Postmark): wait until the search can see a message accepted by
  that attempt (its lag, counted from the attempt's start), then ask; found,
  the receipt is ``sent`` with that id and nothing is sent; not found, send;
* neither (SMTP): a person decides (``ambiguous_smtp_send``), never a resend.

A row past the retry cutoff or the attempt budget whose provider can be
asked is leased for the question alone (``ClaimedRow.past_limit``): found,
it is sent; not found, or asking is refused for good, it goes to review as
before. A delivery webhook that already named an email of this receipt
(``ClaimedRow.evidence_id``) answers without asking. A lookup that fails for
now leaves the row pending: a counted retry whose error starts ``lookup_``,
so the next claim still knows the question is open. A lookup refused because
of our configuration (a bad token: ``Lookup.fix``) stops the run naming the
setting (:func:`run_stop`), the attempt refunded and the question still
open; one refused for good for another reason sends the row to review
without counting it, inside the limits too: asking again cannot help, and
sending again may deliver twice. :func:`after_lookup` turns the answer into
the attempt's result; all three are pure.
docs/architecture.md, "Providers and their guarantees".
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum

from receipts.config import Settings
from receipts.delivery.claims import ClaimedRow, PriorAttempt
from receipts.delivery.decisions import AttemptResult, RunStop
from receipts.delivery.pacing import retry_delay
from receipts.delivery.providers.base import Guarantee, Lookup, Protection
from receipts.delivery.rules.smtp import AMBIGUOUS
from receipts.delivery.summary import ExitCode
from receipts.vocabulary import AttemptOutcome, ReviewReason, RowStatus

LOOKUP_ERROR_PREFIX = "lookup_"
EVIDENCE = "a delivery webhook about an email of this receipt"


class Step(StrEnum):
    SEND = "send"
    LOOK_UP = "look_up"
    WAIT = "wait"  # the search cannot see the earlier attempt yet
    REVIEW = "review"


@dataclass(frozen=True, kw_only=True)
class Plan:
    step: Step
    wait_seconds: float = 0.0
    review_reason: str | None = None
    note: str | None = None


def may_hide_acceptance(prior: PriorAttempt | None, guarantee: Guarantee) -> bool:
    """Whether that attempt may have been accepted without us knowing."""
    if prior is None:
        return False
    if prior.outcome in (None, AttemptOutcome.LEASE_LOST):
        return True
    if prior.outcome != AttemptOutcome.RETRY:
        return False
    if (prior.provider_error or "").startswith(LOOKUP_ERROR_PREFIX):
        return True  # the question an earlier attempt left is still open
    if not guarantee.retry_may_hide_acceptance:
        return False
    status = prior.http_status
    return status is None or status >= 500 or 200 <= status < 300


def plan(row: ClaimedRow, guarantee: Guarantee) -> Plan:
    """What this attempt does before (or instead of) sending."""
    open_question = may_hide_acceptance(row.prior, guarantee)
    if row.past_limit is not None:
        if open_question and (guarantee.can_look_up or row.evidence_id):
            return Plan(step=Step.LOOK_UP)
        return Plan(step=Step.REVIEW, review_reason=row.past_limit)
    if not open_question:
        return Plan(step=Step.SEND)
    if row.evidence_id:
        return Plan(step=Step.LOOK_UP)
    if guarantee.protection == Protection.NONE:
        return Plan(
            step=Step.REVIEW,
            review_reason=AMBIGUOUS,
            note="an earlier attempt may have been delivered (its answer was never recorded), "
            "and this provider cannot be asked",
        )
    if guarantee.protection == Protection.SEARCH:
        assert row.prior is not None
        wait = guarantee.lookup_lag_seconds - row.prior.age_seconds
        if wait > 0:
            return Plan(step=Step.WAIT, wait_seconds=wait)
        return Plan(step=Step.LOOK_UP)
    return Plan(step=Step.SEND)  # the idempotency key makes the retry safe


def without_sending(row: ClaimedRow, chosen: Plan) -> AttemptResult:
    """The result of a plan that sends nothing and asks nothing (WAIT, REVIEW)."""
    if chosen.step == Step.WAIT:
        return AttemptResult(
            status=RowStatus.PENDING,
            outcome=AttemptOutcome.RELEASED,
            refund_attempt=True,
            retry_in_seconds=chosen.wait_seconds,
        )
    assert chosen.review_reason is not None
    return AttemptResult(
        status=RowStatus.REVIEW,
        outcome=_review_outcome(chosen.review_reason),
        refund_attempt=True,  # nothing was sent
        review_reason=chosen.review_reason,
        provider_message=chosen.note,
        last_error=chosen.review_reason,
    )


def evidence_lookup(row: ClaimedRow) -> Lookup | None:
    """The answer a recorded delivery webhook gives, if one named an email of this row."""
    if row.evidence_id is None:
        return None
    return Lookup(provider_id=row.evidence_id, searched=EVIDENCE)


def after_lookup(
    row: ClaimedRow,
    found: Lookup,
    settings: Settings,
    *,
    rng: random.Random | None = None,
) -> AttemptResult | None:
    """The attempt's result after asking; None: not found, so send now."""
    if found.found:
        return AttemptResult(
            status=RowStatus.SENT,
            outcome=AttemptOutcome.SENT,
            http_status=found.http_status,
            provider_id=found.provider_id,
            provider_message=f"found by {found.searched}: not sent again",
        )
    if found.fix is not None:
        # Our configuration, the same for every receipt: the run stops (run_stop);
        # this receipt keeps its attempt and its open question for the next run.
        error = _lookup_error(found.error or "refused")
        return AttemptResult(
            status=RowStatus.PENDING,
            outcome=AttemptOutcome.CONFIG_ERROR,
            refund_attempt=True,
            http_status=found.http_status,
            provider_error=error,
            provider_message=f"{found.searched} refused our configuration: {found.fix}",
            last_error=error,
        )
    if found.error is None and row.past_limit is None:
        return None
    if found.error is not None and found.permanent and row.past_limit is None:
        # Inside the limits: asking again cannot help, and a blind send may deliver twice.
        error = _lookup_error(found.error)
        return AttemptResult(
            status=RowStatus.REVIEW,
            outcome=AttemptOutcome.REVIEW,
            refund_attempt=True,
            http_status=found.http_status,
            provider_error=error,
            provider_message=f"{found.searched} can never be asked ({found.error}), "
            "and an earlier attempt may have been delivered",
            review_reason=error,
            last_error=error,
        )
    if found.error is None or found.permanent:
        assert row.past_limit is not None
        said = f"not found by {found.searched}" if found.error is None else (
            f"{found.searched} could not be asked ({found.error})"
        )  # fmt: skip
        return AttemptResult(
            status=RowStatus.REVIEW,
            outcome=_review_outcome(row.past_limit),
            refund_attempt=True,
            http_status=found.http_status,
            provider_error=found.error,
            provider_message=said,
            review_reason=row.past_limit,
            last_error=found.error,
        )
    error = _lookup_error(found.error)
    return AttemptResult(
        status=RowStatus.PENDING,
        outcome=AttemptOutcome.RETRY,
        retry_in_seconds=retry_delay(
            row.attempt, base=settings.retry_base_seconds, cap=settings.retry_max_seconds, rng=rng
        ),
        http_status=found.http_status,
        provider_error=error,
        provider_message=f"{found.searched} could not be asked; asked again later",
        last_error=error,
    )


def run_stop(found: Lookup) -> RunStop | None:
    """The run stops when asking was refused because of our configuration."""
    if found.fix is None:
        return None
    return RunStop(
        error=(
            f"the provider refused our configuration when asked about an earlier attempt "
            f"(HTTP {found.http_status} {_lookup_error(found.error or 'refused')}): {found.fix}"
        ),
        exit_code=ExitCode.CONFIGURATION,
    )


def _lookup_error(error: str) -> str:
    return error if error.startswith(LOOKUP_ERROR_PREFIX) else LOOKUP_ERROR_PREFIX + error


def _review_outcome(reason: str) -> AttemptOutcome:
    """A receipt sent to review without a send: skipped at a limit, else review."""
    if reason == ReviewReason.RETRY_WINDOW_ELAPSED:
        return AttemptOutcome.SKIPPED_CUTOFF
    if reason == ReviewReason.ATTEMPTS_EXHAUSTED:
        return AttemptOutcome.SKIPPED_BUDGET
    return AttemptOutcome.REVIEW
