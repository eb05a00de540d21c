"""What one provider answer does to the row: the whole answer table, as one pure function.

:func:`decide` takes the provider's answer (already classified by
``receipts.delivery.providers.classify_response``), the attempt number the
claim made and the settings, and returns a :class:`Decision`: the row's next
state and the attempt's outcome (written by ``delivery.sql: record_attempts``),
how long every send of this worker must pause, and whether the run must stop.
It reads no clock, touches no database and sets nothing on the worker; the
caller acts on the value. docs/architecture.md, "What each provider answer
does" and "Attempt outcomes", is the table this module implements:

* accepted with an id: ``sent`` with ``provider_id`` and ``sent_at``;
* retry (timeout, connection error, 408, 5xx, 429, 409 key in progress, 2xx
  without id): ``pending`` again after :func:`retry_delay`, never sooner
  than ``Retry-After``;
* rejected (409 key reused with another body, other 4xx): ``review`` with
  the provider's error name as the reason;
* unauthorized (401/403): ``pending`` at once with the attempt refunded (the
  budget is for problems of the message, not of our API key), and the run
  stops with exit code 2 and a message naming ``RESEND_API_KEY``.

A 429 pauses every send of the worker for ``Retry-After``, else
``ratelimit-reset``, else :data:`DEFAULT_RATE_LIMIT_PAUSE`; any answer with
``ratelimit-remaining: 0`` pauses them until ``ratelimit-reset``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from receipts.config import Settings
from receipts.delivery.providers import ProviderAnswer
from receipts.vocabulary import AttemptOutcome, ReviewReason, RowStatus

# A 429 without any header telling us how long to wait pauses sends this long.
DEFAULT_RATE_LIMIT_PAUSE = 1.0
# The exit code of a run stopped because the provider refused our credentials.
EXIT_PROVIDER_REFUSED_CREDENTIALS = 2


@dataclass(frozen=True, kw_only=True)
class AttemptResult:
    """How one attempt ends: the row's next state and the attempt log entry."""

    status: RowStatus  # pending | sent | review
    outcome: AttemptOutcome  # the email_attempts.outcome value
    retry_in_seconds: float = 0.0  # for pending: when the row is ready again
    refund_attempt: bool = False  # the attempt did not count against the budget
    http_status: int | None = None
    provider_error: str | None = None
    provider_message: str | None = None  # the provider's own words, one line
    provider_id: str | None = None
    review_reason: str | None = None
    last_error: str | None = None


@dataclass(frozen=True, kw_only=True)
class RunStop:
    """The run must stop: no new sends; ``error`` is printed, ``exit_code`` returned."""

    error: str
    exit_code: int


@dataclass(frozen=True, kw_only=True)
class Decision:
    """Everything one answer means: for the row, for the worker's pace, for the run."""

    result: AttemptResult
    pause_sends: float = 0.0  # seconds every send of this worker waits (0: none)
    stop: RunStop | None = None


# Claimed but not sent (shutdown, or no send slot before the lease would end):
# back to pending at once, the attempt refunded.
RELEASED = AttemptResult(
    status=RowStatus.PENDING, outcome=AttemptOutcome.RELEASED, refund_attempt=True
)


def decide(
    answer: ProviderAnswer,
    attempt: int,
    settings: Settings,
    *,
    rng: random.Random | None = None,
) -> Decision:
    """The row's fate after ``answer`` to attempt number ``attempt``."""
    return Decision(
        result=_result(answer, attempt, settings, rng),
        pause_sends=_pause(answer),
        stop=_stop(answer),
    )


def _result(
    answer: ProviderAnswer, attempt: int, settings: Settings, rng: random.Random | None
) -> AttemptResult:
    # What the provider said is logged with the attempt whatever the row becomes.
    said = AttemptResult(
        status=RowStatus.PENDING,
        outcome=AttemptOutcome.RETRY,
        http_status=answer.http_status,
        provider_error=answer.error,
        provider_message=answer.message,
        provider_id=answer.provider_id,
        last_error=answer.error,
    )
    if answer.kind == "accepted":
        return replace(said, status=RowStatus.SENT, outcome=AttemptOutcome.SENT, last_error=None)
    if answer.kind == "rejected":
        reason = answer.error or ReviewReason.PROVIDER_REJECTED
        return replace(
            said, status=RowStatus.REVIEW, outcome=AttemptOutcome.REVIEW, review_reason=reason
        )
    if answer.kind == "unauthorized":
        return replace(said, outcome=AttemptOutcome.CONFIG_ERROR, refund_attempt=True)
    delay = retry_delay(
        attempt,
        base=settings.retry_base_seconds,
        cap=settings.retry_max_seconds,
        retry_after=answer.retry_after,
        rng=rng,
    )
    return replace(said, retry_in_seconds=delay)


def _pause(answer: ProviderAnswer) -> float:
    """How long the provider asked every send of ours to wait."""
    if answer.http_status == 429:
        return answer.retry_after or answer.rate_limit_reset or DEFAULT_RATE_LIMIT_PAUSE
    if answer.rate_limit_remaining == 0 and answer.rate_limit_reset:
        return answer.rate_limit_reset
    return 0.0


def _stop(answer: ProviderAnswer) -> RunStop | None:
    if answer.kind != "unauthorized":
        return None
    return RunStop(
        error=(
            f"the provider refused our credentials (HTTP {answer.http_status} "
            f"{answer.error}): check RESEND_API_KEY and the sender domain"
        ),
        exit_code=EXIT_PROVIDER_REFUSED_CREDENTIALS,
    )


def retry_delay(
    attempt: int,
    *,
    base: float,
    cap: float,
    retry_after: float | None = None,
    rng: random.Random | None = None,
) -> float:
    """Seconds until the next try: doubling per attempt, half jitter, Retry-After honoured.

    ``base`` doubles with each attempt up to ``cap``; half of that is fixed
    and half random, and the result is never below ``retry_after`` nor
    above ``cap``.
    """
    exponential = min(cap, base * 2.0 ** max(0, attempt - 1))
    jittered = exponential / 2.0 + (rng or random).uniform(0.0, exponential / 2.0)
    return min(cap, max(jittered, retry_after or 0.0))
