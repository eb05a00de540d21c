"""What one provider answer does to the row, the pace and the run: the whole table.

:func:`decide` takes the provider's answer (the facts read by
``receipts.delivery.answers.classify_response``), the attempt number the
claim made, the settings and the time, and returns a :class:`Decision`: the
row's next state and the attempt's outcome (written by ``delivery.sql:
record_attempts``), how long every send of this worker must pause, the
sending pause a quota answer asks for, and whether the run must stop. It
reads no clock (``now`` is given), touches no database and sets nothing on
the worker. :data:`RESEND_ERRORS` holds every error name Resend documents
(https://resend.com/docs/api-reference/errors); :func:`reaction_to` says
what any answer is: ``sent``, ``retry`` (attempt counted), ``rate_limited``
or ``quota`` (attempt refunded: not the message's fault), ``review`` (a 4xx
about this message), or ``configuration`` (refunded, and the run stops with
exit code 2 naming what to fix). docs/architecture.md, "What each provider
answer does", is the table in words.

Every wait the provider asks for (``Retry-After``, ``ratelimit-reset``) is
capped: at ``RECEIPTS_RETRY_MAX_SECONDS`` (1 h) for a rate limit, at
:data:`QUOTA_PAUSE_MAX_SECONDS` for a quota. ``Decision.asked_pause`` keeps
what was asked, so the worker can log the cut.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from receipts.config import Settings
from receipts.delivery.answers import KEY_IN_PROGRESS, ProviderAnswer
from receipts.delivery.pacing import retry_delay
from receipts.delivery.summary import ExitCode
from receipts.vocabulary import AttemptOutcome, PauseReason, ReviewReason, RowStatus

# A 429 without any header telling us how long to wait pauses sends this long.
DEFAULT_RATE_LIMIT_PAUSE = 1.0
# Resend states its rate limit per second: a full window that resets within
# this long is already covered by the send spacing (receipts.delivery.pacing).
RATE_WINDOW_SECONDS = 1.0
# A quota pause never outlasts a day without a new answer from the provider:
# a daily quota cannot, and a monthly one is checked again (one request) daily.
QUOTA_PAUSE_MAX_SECONDS = 24 * 3600.0


class Reaction(StrEnum):
    SENT = "sent"
    RETRY = "retry"
    RATE_LIMITED = "rate_limited"
    QUOTA = "quota"
    REVIEW = "review"
    CONFIGURATION = "configuration"


@dataclass(frozen=True)
class Rule:
    """What an answer is, and for a configuration error the setting to fix."""

    reaction: Reaction
    fix: str | None = None


_API_KEY = "check RESEND_API_KEY: missing, revoked, or not a key of this Resend team"
_API_URL = "check RESEND_API_URL: it must be Resend's API base, https://api.resend.com"
_FROM_DOMAIN = (
    "check EMAIL_FROM's domain: it must be verified in Resend (resend.com/domains) "
    "to send to customers"
)
_FROM_ADDRESS = "check EMAIL_FROM: Resend refused it as a from address"

# Every error name Resend documents, by (HTTP status, name). A 400
# validation_error whose message says the API key is invalid is a
# configuration error too (see reaction_to).
RESEND_ERRORS: dict[tuple[int, str], Rule] = {
    (400, "invalid_idempotency_key"): Rule(Reaction.REVIEW),
    (400, "validation_error"): Rule(Reaction.REVIEW),
    (401, "missing_api_key"): Rule(Reaction.CONFIGURATION, _API_KEY),
    (401, "restricted_api_key"): Rule(Reaction.CONFIGURATION, _API_KEY),
    (401, "validation_error"): Rule(Reaction.CONFIGURATION, _API_KEY),
    (403, "invalid_api_key"): Rule(Reaction.CONFIGURATION, _API_KEY),
    (403, "validation_error"): Rule(Reaction.CONFIGURATION, _FROM_DOMAIN),
    (404, "not_found"): Rule(Reaction.CONFIGURATION, _API_URL),
    (405, "method_not_allowed"): Rule(Reaction.CONFIGURATION, _API_URL),
    (409, "invalid_idempotent_request"): Rule(Reaction.REVIEW),
    (409, "concurrent_idempotent_requests"): Rule(Reaction.RETRY),
    (422, "invalid_attachment"): Rule(Reaction.REVIEW),
    (422, "invalid_from_address"): Rule(Reaction.CONFIGURATION, _FROM_ADDRESS),
    (422, "invalid_access"): Rule(Reaction.REVIEW),
    (422, "invalid_parameter"): Rule(Reaction.REVIEW),
    (422, "invalid_region"): Rule(Reaction.REVIEW),
    (422, "missing_required_field"): Rule(Reaction.REVIEW),
    (429, "monthly_quota_exceeded"): Rule(Reaction.QUOTA),
    (429, "daily_quota_exceeded"): Rule(Reaction.QUOTA),
    (429, "rate_limit_exceeded"): Rule(Reaction.RATE_LIMITED),
    (451, "security_error"): Rule(Reaction.REVIEW),
    (500, "application_error"): Rule(Reaction.RETRY),
    (500, "internal_server_error"): Rule(Reaction.RETRY),
}


def reaction_to(answer: ProviderAnswer) -> Rule:
    """What this answer is: a documented error by its name, anything else by its status."""
    status = answer.http_status
    if status is None:
        return Rule(Reaction.RETRY)  # no answer: timeout, connection error
    if 200 <= status < 300:
        return Rule(Reaction.SENT if answer.accepted else Reaction.RETRY)
    if status == 400 and answer.error == "validation_error" and answer.api_key_refused:
        return Rule(Reaction.CONFIGURATION, _API_KEY)
    documented = RESEND_ERRORS.get((status, answer.error or ""))
    if documented is not None:
        return documented
    return _by_status(status, answer.error)


def _by_status(status: int, error: str | None) -> Rule:
    """An answer Resend does not document: unknown 4xx is the message's, 5xx a retry."""
    if status in (401, 403):
        return Rule(Reaction.CONFIGURATION, _API_KEY)
    if 300 <= status < 400 or status in (404, 405):
        return Rule(Reaction.CONFIGURATION, _API_URL)
    if status == 408 or (status == 409 and error == KEY_IN_PROGRESS):
        return Rule(Reaction.RETRY)
    if status == 429:
        return Rule(Reaction.RATE_LIMITED)
    if 400 <= status < 500:
        return Rule(Reaction.REVIEW)
    return Rule(Reaction.RETRY)


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
    rng: random.Random | None = None,
) -> Decision:
    """The row's fate after ``answer`` to attempt number ``attempt``, at time ``now``."""
    rule = reaction_to(answer)
    asked = _asked_pause(answer, rule.reaction)
    pause = min(asked, settings.retry_max_seconds)
    quota = _quota_pause(answer, now) if rule.reaction == Reaction.QUOTA else None
    return Decision(
        result=_result(answer, rule.reaction, attempt, settings, pause, rng),
        pause_sends=0.0 if quota is not None else pause,
        asked_pause=0.0 if quota is not None else asked,
        provider_rate=_provider_rate(answer),
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


def _asked_pause(answer: ProviderAnswer, reaction: Reaction) -> float:
    """How long the provider asked every send of ours to wait (uncapped)."""
    if reaction in (Reaction.RATE_LIMITED, Reaction.QUOTA):
        return _first_given(answer.retry_after, answer.rate_limit_reset) or (
            DEFAULT_RATE_LIMIT_PAUSE
        )
    reset = answer.rate_limit_reset
    if answer.rate_limit_remaining == 0 and reset is not None and reset > RATE_WINDOW_SECONDS:
        return reset
    return 0.0


def _first_given(*seconds: float | None) -> float | None:
    return next((value for value in seconds if value is not None and value > 0), None)


def _provider_rate(answer: ProviderAnswer) -> float | None:
    """``ratelimit-limit`` as requests per second (Resend states its limit per second)."""
    limit = answer.rate_limit_limit
    return float(limit) / RATE_WINDOW_SECONDS if limit else None


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
