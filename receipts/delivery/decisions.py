"""What one provider answer does to the row, the pace and the run: the whole table.

:func:`decide` takes the provider's answer (the facts read by
``receipts.delivery.answers.classify_response``), the attempt number the
claim made, the settings and the time, and returns a :class:`Decision`: the
row's next state and the attempt's outcome (written by ``delivery.sql:
record_attempts``), how long every send of this worker must pause, the
sending pause a quota answer asks for, and whether the run must stop. It
reads no clock (``now`` is given), touches no database and sets nothing on
the worker. What the answer *is* comes from the answer table of the provider
that gave it (``receipts.delivery.rules``: Resend's, Postmark's, SMTP's):
``sent``, ``retry`` (attempt counted), ``rate_limited`` or ``quota``
(attempt refunded: not the message's fault), ``review`` (a problem of this
message), or ``configuration`` (refunded, and the run stops with exit code 2
naming what to fix). A retry after an answer that may hide an accepted send
waits at least the table's ``retry_floor_seconds`` (Postmark: its search lag).
docs/architecture.md, "What each provider answer does", is the table in words.

Every wait the provider asks for (``Retry-After``, ``ratelimit-reset``) is
capped: at ``RECEIPTS_RETRY_MAX_SECONDS`` (1 h) for a rate limit, at
:data:`QUOTA_PAUSE_MAX_SECONDS` for a quota. ``Decision.asked_pause`` keeps
what was asked, so the worker can log the cut.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from receipts.config import Settings
from receipts.delivery.answers import ProviderAnswer
from receipts.delivery.pacing import retry_delay
from receipts.delivery.rules import AnswerTable, Reaction, Rule
from receipts.delivery.rules.resend import RESEND
from receipts.delivery.summary import ExitCode
from receipts.vocabulary import AttemptOutcome, PauseReason, ReviewReason, RowStatus

# A 429 without any header telling us how long to wait pauses sends this long.
DEFAULT_RATE_LIMIT_PAUSE = 1.0
# A quota pause never outlasts a day without a new answer from the provider:
# a daily quota cannot, and a monthly one is checked again (one request) daily.
QUOTA_PAUSE_MAX_SECONDS = 24 * 3600.0


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
class QuotaPause:
    """No worker sends through this provider for ``seconds`` (until the quota resets)."""

    reason: PauseReason
    seconds: float
    asked: float | None = None  # what the provider's headers asked for, if anything


@dataclass(frozen=True, kw_only=True)
class Decision:
    """Everything one answer means: for the row, for the worker's pace, for the run."""

    result: AttemptResult
    pause_sends: float = 0.0  # seconds every send of this worker waits (0: none)
    asked_pause: float = 0.0  # what the provider asked for, before the cap
    provider_rate: float | None = None  # requests per second the provider says it allows
    quota: QuotaPause | None = None
    stop: RunStop | None = None


# Claimed but not sent (shutdown, no send slot before the lease would end, or
# sending paused): back to pending at once, the attempt refunded.
RELEASED = AttemptResult(
    status=RowStatus.PENDING, outcome=AttemptOutcome.RELEASED, refund_attempt=True
)


def decide(
    answer: ProviderAnswer,
    attempt: int,
    settings: Settings,
    *,
    now: datetime,
    table: AnswerTable = RESEND,
    rng: random.Random | None = None,
) -> Decision:
    """The row's fate after ``answer`` to attempt number ``attempt``, at time ``now``,
    by the answer ``table`` of the provider that gave it."""
    rule = table.reaction_to(answer)
    asked = _asked_pause(answer, rule.reaction, table.rate_window_seconds)
    pause = min(asked, settings.retry_max_seconds)
    quota = _quota_pause(answer, now) if rule.reaction == Reaction.QUOTA else None
    result = _result(answer, rule.reaction, attempt, settings, pause, rng)
    if result.outcome == AttemptOutcome.RETRY and _may_hide_acceptance(answer):
        result = replace(
            result, retry_in_seconds=max(result.retry_in_seconds, table.retry_floor_seconds)
        )
    return Decision(
        result=result,
        pause_sends=0.0 if quota is not None else pause,
        asked_pause=0.0 if quota is not None else asked,
        provider_rate=_provider_rate(answer, table.rate_window_seconds),
        quota=quota,
        stop=_stop(answer, rule),
    )


def _result(
    answer: ProviderAnswer,
    reaction: Reaction,
    attempt: int,
    settings: Settings,
    pause: float,
    rng: random.Random | None,
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
    if reaction == Reaction.SENT:
        return replace(said, status=RowStatus.SENT, outcome=AttemptOutcome.SENT, last_error=None)
    if reaction == Reaction.REVIEW:
        reason = answer.error or ReviewReason.PROVIDER_REJECTED
        return replace(
            said, status=RowStatus.REVIEW, outcome=AttemptOutcome.REVIEW, review_reason=reason
        )
    if reaction == Reaction.CONFIGURATION:
        return replace(said, outcome=AttemptOutcome.CONFIG_ERROR, refund_attempt=True)
    if reaction == Reaction.QUOTA:
        return replace(said, outcome=AttemptOutcome.QUOTA_EXCEEDED, refund_attempt=True)
    if reaction == Reaction.RATE_LIMITED:
        return replace(
            said, outcome=AttemptOutcome.RATE_LIMITED, refund_attempt=True, retry_in_seconds=pause
        )
    delay = retry_delay(
        attempt,
        base=settings.retry_base_seconds,
        cap=settings.retry_max_seconds,
        retry_after=answer.retry_after,
        rng=rng,
    )
    return replace(said, retry_in_seconds=delay)


def _may_hide_acceptance(answer: ProviderAnswer) -> bool:
    """No reply, a 5xx, or a 2xx without an id: the provider may have taken the message."""
    status = answer.http_status
    return status is None or status >= 500 or 200 <= status < 300


def _asked_pause(answer: ProviderAnswer, reaction: Reaction, window: float) -> float:
    """How long the provider asked every send of ours to wait (uncapped)."""
    if reaction in (Reaction.RATE_LIMITED, Reaction.QUOTA):
        return _first_given(answer.retry_after, answer.rate_limit_reset) or (
            DEFAULT_RATE_LIMIT_PAUSE
        )
    reset = answer.rate_limit_reset
    if answer.rate_limit_remaining == 0 and reset is not None and reset > window:
        return reset
    return 0.0


def _first_given(*seconds: float | None) -> float | None:
    return next((value for value in seconds if value is not None and value > 0), None)


def _provider_rate(answer: ProviderAnswer, window: float) -> float | None:
    """``ratelimit-limit`` as requests per second (Resend states its limit per second)."""
    limit = answer.rate_limit_limit
    return float(limit) / window if limit else None


def _quota_pause(answer: ProviderAnswer, now: datetime) -> QuotaPause:
    """Until the quota resets: the provider's wait if it gave one, else the next
    UTC midnight (a monthly quota is then checked again each day); at most a day."""
    reason = (
        PauseReason.MONTHLY_QUOTA
        if answer.error == PauseReason.MONTHLY_QUOTA
        else PauseReason.DAILY_QUOTA
    )
    asked = _first_given(answer.retry_after, answer.rate_limit_reset)
    seconds = asked if asked is not None else (next_utc_midnight(now) - now).total_seconds()
    return QuotaPause(reason=reason, seconds=min(seconds, QUOTA_PAUSE_MAX_SECONDS), asked=asked)


def next_utc_midnight(now: datetime) -> datetime:
    tomorrow = now.astimezone(UTC).date() + timedelta(days=1)
    return datetime(tomorrow.year, tomorrow.month, tomorrow.day, tzinfo=UTC)


def _stop(answer: ProviderAnswer, rule: Rule) -> RunStop | None:
    if rule.reaction != Reaction.CONFIGURATION:
        return None
    return RunStop(
        error=(
            f"the provider refused our configuration (HTTP {answer.http_status} "
            f"{answer.error}): {rule.fix}"
        ),
        exit_code=ExitCode.CONFIGURATION,
    )
