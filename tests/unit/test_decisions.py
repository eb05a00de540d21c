"""The answer table of docs/architecture.md ("What each provider answer does"), row by row.

Each case starts from what came over the wire (an HTTP status, headers and
Resend's error body ``{"statusCode", "name", "message"}`` through
``classify_response``, or the answer ``ResendProvider`` gives for a network
failure) and checks the whole :class:`Decision`: what the row becomes, the
attempt's outcome, whether the attempt is refunded, how long every send
pauses, the quota pause, and whether the run stops and what it names. Every
error name Resend documents (https://resend.com/docs/api-reference/errors)
has its row. No database, no server.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from receipts.config import Settings
from receipts.delivery.answers import ProviderAnswer, classify_response
from receipts.delivery.decisions import (
    DEFAULT_RATE_LIMIT_PAUSE,
    QUOTA_PAUSE_MAX_SECONDS,
    RELEASED,
    Decision,
    decide,
)
from receipts.delivery.pacing import retry_delay
from receipts.delivery.rules.resend import RESEND_ERRORS
from receipts.vocabulary import AttemptOutcome, PauseReason, ReviewReason, RowStatus
from tests.resend_errors import DOCUMENTED

SETTINGS = Settings(retry_base_seconds=15.0, retry_max_seconds=3600.0)
# 21:30 UTC: the next UTC midnight is 2.5 h away.
NOW = datetime(2026, 11, 30, 21, 30, tzinfo=UTC)
TO_MIDNIGHT = 2.5 * 3600
ROOT = Path(__file__).resolve().parents[2]


def http(status: int, body: dict[str, Any] | None = None, **headers: str) -> ProviderAnswer:
    """The answer ``ResendProvider`` gives for one HTTP response."""
    return classify_response(status, headers, json.dumps(body or {}).encode())


def error(status: int, name: str, message: str = "free text", **headers: str) -> ProviderAnswer:
    """A Resend error response: ``{"statusCode", "name", "message"}``."""
    return http(status, {"statusCode": status, "name": name, "message": message}, **headers)


@dataclass(frozen=True)
class Row:
    """One row of the table: what the answer must do."""

    status: RowStatus
    outcome: AttemptOutcome
    review_reason: str | None = None
    refunded: bool = False
    retry_between: tuple[float, float] | None = None  # seconds until ready again
    pause: float = 0.0
    quota: tuple[PauseReason, float] | None = None  # the sending pause: why, how long
    stop_names: str | None = None  # the run stops (exit 2) naming this
    provider_id: str | None = None
    http_status: int | None = None


def retry(last_error: str | None, http_status: int | None, *, at_least: float = 7.5) -> Row:
    """Pending again after the first backoff (15 s, half jittered) or Retry-After; counted."""
    del last_error  # the name says which answer the row is for; last_error is checked generally
    return Row(
        status=RowStatus.PENDING,
        outcome=AttemptOutcome.RETRY,
        retry_between=(at_least, max(at_least, 15.0)),
        http_status=http_status,
    )


def rate_limited(name: str, pause: float, http_status: int = 429) -> Row:
    """Pending again once the provider's wait is over; refunded; every send pauses."""
    del name
    return Row(
        status=RowStatus.PENDING,
        outcome=AttemptOutcome.RATE_LIMITED,
        refunded=True,
        retry_between=(pause, pause),
        pause=pause,
        http_status=http_status,
    )


def quota(name: str, seconds: float) -> Row:
    """Pending, refunded, and sending paused for every worker until the quota resets."""
    return Row(
        status=RowStatus.PENDING,
        outcome=AttemptOutcome.QUOTA_EXCEEDED,
        refunded=True,
        retry_between=(0.0, 0.0),
        quota=(PauseReason(name), seconds),
        http_status=429,
    )


def review(reason: str, http_status: int | None) -> Row:
    return Row(
        status=RowStatus.REVIEW,
        outcome=AttemptOutcome.REVIEW,
        review_reason=reason,
        http_status=http_status,
    )


def refused(http_status: int, name: str, names: str) -> Row:
    """A configuration error: pending at once, refunded, the run stops naming what to fix."""
    del name
    return Row(
        status=RowStatus.PENDING,
        outcome=AttemptOutcome.CONFIG_ERROR,
        refunded=True,
        retry_between=(0.0, 0.0),
        stop_names=names,
        http_status=http_status,
    )


KEY, URL, FROM, DOMAIN = "RESEND_API_KEY", "RESEND_API_URL", "EMAIL_FROM", "EMAIL_FROM's domain"

# What each documented error does, in the order of DOCUMENTED.
DOCUMENTED_ROWS = [
    review("invalid_idempotency_key", 400),
    review("validation_error", 400),
    refused(400, "validation_error", KEY),
    refused(401, "missing_api_key", KEY),
    refused(401, "restricted_api_key", KEY),
    refused(401, "validation_error", KEY),
    refused(403, "invalid_api_key", KEY),
    refused(403, "validation_error", DOMAIN),
    refused(403, "validation_error", DOMAIN),
    refused(404, "not_found", URL),
    refused(405, "method_not_allowed", URL),
    review("invalid_idempotent_request", 409),
    retry("concurrent_idempotent_requests", 409),
    review("invalid_attachment", 422),
    refused(422, "invalid_from_address", FROM),
    review("invalid_access", 422),
    review("invalid_parameter", 422),
    review("invalid_region", 422),
    review("missing_required_field", 422),
    quota("monthly_quota_exceeded", TO_MIDNIGHT),
    quota("daily_quota_exceeded", TO_MIDNIGHT),
    rate_limited("rate_limit_exceeded", DEFAULT_RATE_LIMIT_PAUSE),
    review("security_error", 451),
    retry("application_error", 500),
    retry("internal_server_error", 500),
]

TABLE = [
    pytest.param(error(status, name, message), row, id=f"{status}-{name}-{message[:24]}")
    for (status, name, message), row in zip(DOCUMENTED, DOCUMENTED_ROWS, strict=True)
] + [
    pytest.param(
        http(200, {"id": "re_123"}),
        Row(RowStatus.SENT, AttemptOutcome.SENT, provider_id="re_123", http_status=200),
        id="2xx-with-id",
    ),
    pytest.param(http(200, {}), retry("no_provider_id", 200), id="2xx-without-id"),
    pytest.param(ProviderAnswer(error="timeout"), retry("timeout", None), id="timeout"),
    pytest.param(
        ProviderAnswer(error="connection_error"), retry("connection_error", None), id="no-answer"
    ),
    pytest.param(http(301), refused(301, "http_301", URL), id="3xx-redirect"),
    pytest.param(http(404), refused(404, "http_404", URL), id="404-without-a-name"),
    pytest.param(error(401, "unheard_of"), refused(401, "unheard_of", KEY), id="401-unknown"),
    pytest.param(error(408, "request_timeout"), retry("request_timeout", 408), id="408"),
    pytest.param(http(418), review("http_418", 418), id="unknown-4xx-without-a-name"),
    pytest.param(error(400, "brand_new_error"), review("brand_new_error", 400), id="unknown-4xx"),
    pytest.param(
        error(422, "invalid_idempotent_request"),
        review("invalid_idempotent_request", 422),
        id="422-key-reused-with-another-body",
    ),
    pytest.param(http(502), retry("http_502", 502), id="unknown-5xx-without-a-name"),
    pytest.param(
        error(503, "service_unavailable"), retry("service_unavailable", 503), id="unknown-5xx"
    ),
    pytest.param(
        error(429, "too_many_requests"),
        rate_limited("too_many_requests", DEFAULT_RATE_LIMIT_PAUSE),
        id="429-unknown-name",
    ),
    pytest.param(
        error(429, "rate_limit_exceeded", **{"Retry-After": "2"}),
        rate_limited("rate_limit_exceeded", 2.0),
        id="429-with-retry-after",
    ),
    pytest.param(
        error(429, "rate_limit_exceeded", **{"ratelimit-reset": "3"}),
        rate_limited("rate_limit_exceeded", 3.0),
        id="429-with-ratelimit-reset-only",
    ),
    pytest.param(
        error(429, "rate_limit_exceeded", **{"Retry-After": "86400"}),
        rate_limited("rate_limit_exceeded", 3600.0),
        id="429-retry-after-capped-at-1h",
    ),
    pytest.param(
        error(429, "rate_limit_exceeded", **{"Retry-After": "inf"}),
        rate_limited("rate_limit_exceeded", 3600.0),
        id="429-retry-after-inf-capped-at-1h",
    ),
    pytest.param(
        error(429, "daily_quota_exceeded", **{"Retry-After": "600"}),
        quota("daily_quota_exceeded", 600.0),
        id="daily-quota-with-retry-after",
    ),
    pytest.param(
        error(429, "monthly_quota_exceeded", **{"ratelimit-reset": "7200"}),
        quota("monthly_quota_exceeded", 7200.0),
        id="monthly-quota-with-ratelimit-reset",
    ),
    pytest.param(
        error(429, "monthly_quota_exceeded", **{"Retry-After": "inf"}),
        quota("monthly_quota_exceeded", QUOTA_PAUSE_MAX_SECONDS),
        id="quota-pause-capped-at-a-day",
    ),
    pytest.param(
        ProviderAnswer(http_status=422, error="validation_error"),
        review("validation_error", 422),
        id="file-sink-unusable-payload",
    ),
    pytest.param(
        ProviderAnswer(http_status=422),
        review(ReviewReason.PROVIDER_REJECTED, 422),
        id="refused-without-an-error-name",
    ),
]


@pytest.mark.parametrize(("answer", "expected"), TABLE)
def test_each_answer_decides_the_row_the_pace_and_the_run(
    answer: ProviderAnswer, expected: Row
) -> None:
    """One row of the table: the row's next state, the attempt's outcome and
    refund, the pause of every send, the quota pause, and whether the run
    stops (exit 2, naming the setting to fix); all returned, nothing set."""
    decision = decide(answer, 1, SETTINGS, now=NOW)
    result = decision.result
    assert (result.status, result.outcome) == (expected.status, expected.outcome)
    assert result.review_reason == expected.review_reason
    # The provider's own error name is kept as the row's last error (none once sent).
    assert result.last_error == (None if expected.status == RowStatus.SENT else answer.error)
    assert result.refund_attempt is expected.refunded
    assert result.provider_id == expected.provider_id
    assert result.http_status == expected.http_status
    assert result.provider_error == answer.error
    if expected.retry_between is not None:
        low, high = expected.retry_between
        assert low <= result.retry_in_seconds <= high
    assert decision.pause_sends == expected.pause
    if expected.quota is None:
        assert decision.quota is None
    else:
        assert decision.quota is not None
        assert (decision.quota.reason, decision.quota.seconds) == expected.quota
    if expected.stop_names is None:
        assert decision.stop is None
    else:
        assert decision.stop is not None and decision.stop.exit_code == 2
        assert expected.stop_names in decision.stop.error
        assert f"HTTP {expected.http_status} {answer.error}" in decision.stop.error
        assert "\n" not in decision.stop.error


def test_the_code_knows_every_documented_error_name_and_no_other() -> None:
    """RESEND_ERRORS holds exactly the (status, name) pairs Resend documents."""
    assert set(RESEND_ERRORS) == {(status, name) for status, name, _ in DOCUMENTED}


def test_the_architecture_document_lists_every_documented_error_name() -> None:
    """docs/architecture.md's decision table has a row for each documented name."""
    document = (ROOT / "docs" / "architecture.md").read_text()
    table = document[document.index("## What each provider answer does") :]
    table = table[: table.index("\n## ", 10)]
    for status, name in RESEND_ERRORS:
        assert re.search(rf"\| {status} `{name}`", table), (status, name)


def test_the_wait_asked_for_is_kept_to_log_its_cut() -> None:
    """Retry-After: 86400 pauses 1 h and says it was asked for a day."""
    decision = decide(error(429, "rate_limit_exceeded", **{"Retry-After": "86400"}), 1, SETTINGS,
                      now=NOW)  # fmt: skip
    assert (decision.pause_sends, decision.asked_pause) == (3600.0, 86400.0)


def test_the_cap_is_the_retry_maximum_setting() -> None:
    """RECEIPTS_RETRY_MAX_SECONDS is the one bound: at 60 s a 10-minute Retry-After waits 60 s."""
    settings = Settings(retry_max_seconds=60.0)
    decision = decide(error(429, "rate_limit_exceeded", **{"Retry-After": "600"}), 1, settings,
                      now=NOW)  # fmt: skip
    assert decision.pause_sends == 60.0 and decision.result.retry_in_seconds == 60.0


def test_a_used_up_window_longer_than_a_second_pauses_sends_even_after_a_success() -> None:
    """``ratelimit-remaining: 0`` with ``ratelimit-reset: 2`` on an accepted send:
    the row is sent, and every send waits 2 s."""
    answer = http(200, {"id": "re_1"}, **{"ratelimit-remaining": "0", "ratelimit-reset": "2"})
    decision = decide(answer, 1, SETTINGS, now=NOW)
    assert decision.result.status == RowStatus.SENT and decision.pause_sends == 2.0


def test_a_used_up_one_second_window_is_left_to_the_spacing() -> None:
    """``ratelimit-remaining: 0``, ``ratelimit-reset: 1``: the spacing already keeps
    to the limit (whole seconds are too coarse to pause on); no pause."""
    answer = http(200, {"id": "re_1"}, **{"ratelimit-remaining": "0", "ratelimit-reset": "1"})
    assert decide(answer, 1, SETTINGS, now=NOW).pause_sends == 0.0


def test_the_provider_rate_limit_is_read_per_second() -> None:
    """``ratelimit-limit: 5`` tells the pace that the provider allows 5 requests/s."""
    answer = http(200, {"id": "re_1"}, **{"ratelimit-limit": "5", "ratelimit-remaining": "4"})
    assert decide(answer, 1, SETTINGS, now=NOW).provider_rate == 5.0
    assert decide(http(200, {"id": "re_1"}), 1, SETTINGS, now=NOW).provider_rate is None


def test_a_quota_without_a_header_pauses_until_the_next_utc_midnight() -> None:
    """At 23:59:30 UTC the pause is 30 s; a time given in another zone counts the same."""
    late = datetime(2026, 11, 30, 23, 59, 30, tzinfo=UTC)
    assert decide(error(429, "daily_quota_exceeded"), 1, SETTINGS, now=late).quota is not None
    decision = decide(error(429, "daily_quota_exceeded"), 1, SETTINGS, now=late.astimezone())
    assert decision.quota is not None and decision.quota.seconds == 30.0


def test_the_retry_delay_grows_with_the_attempt_number() -> None:
    """The attempt number the claim made picks the backoff step (attempt 3: 60 s)."""
    decision = decide(http(500), 3, SETTINGS, now=NOW, rng=random.Random(7))
    assert 30.0 <= decision.result.retry_in_seconds <= 60.0


def test_the_same_answer_and_seed_decide_the_same() -> None:
    """Given its random source and time, the decision is a pure function of its inputs."""
    first = decide(http(503), 2, SETTINGS, now=NOW, rng=random.Random(1))
    again = decide(http(503), 2, SETTINGS, now=NOW, rng=random.Random(1))
    assert first == again and isinstance(first, Decision)


def test_a_released_row_is_pending_at_once_with_its_attempt_refunded() -> None:
    """Claimed but never sent (stop, pause, or no send slot inside the lease)."""
    assert (RELEASED.status, RELEASED.outcome) == (RowStatus.PENDING, AttemptOutcome.RELEASED)
    assert RELEASED.refund_attempt and RELEASED.retry_in_seconds == 0.0


def test_backoff_doubles_with_jitter_and_stays_bounded() -> None:
    """15 s doubling per attempt up to 1 h; each delay between half and all of
    its step, and not all the same (jitter)."""
    for attempt, full in [(1, 15.0), (2, 30.0), (3, 60.0), (9, 3600.0), (30, 3600.0)]:
        delays = [retry_delay(attempt, base=15, cap=3600) for _ in range(200)]
        assert all(full / 2 <= delay <= full for delay in delays)
        assert len(set(delays)) > 1


def test_backoff_never_retries_before_retry_after_but_caps_it() -> None:
    """Retry-After longer than the backoff wins; one longer than the cap is cut to it."""
    assert retry_delay(1, base=15, cap=3600, retry_after=90) == 90
    assert retry_delay(1, base=15, cap=3600, retry_after=86400) == 3600
    assert retry_delay(1, base=15, cap=3600, retry_after=float("inf")) == 3600


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("7", 7.0), (" 2.5 ", 2.5), ("-3", 0.0), ("inf", float("inf")), ("1e999", float("inf")),
     ("nan", None), ("soon", None), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0)],
)  # fmt: skip
def test_retry_after_is_read_as_seconds_or_a_date(value: str, seconds: float | None) -> None:
    """Delta-seconds, an HTTP date (past: 0), infinity kept for the cap; nonsense is None."""
    assert http(429, None, **{"Retry-After": value}).retry_after == seconds
