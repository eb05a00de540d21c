"""The answer table of docs/architecture.md ("What each provider answer does"), row by row.

Each case starts from what came over the wire (an HTTP status, headers and
body through ``classify_response``, or the answer ``ResendProvider`` gives
for a network failure) and checks the whole :class:`Decision`: what the row
becomes, the attempt's outcome, whether the attempt is refunded, how long
every send pauses, and whether the run stops. No database, no server.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

import pytest

from receipts.config import Settings
from receipts.delivery.decisions import (
    DEFAULT_RATE_LIMIT_PAUSE,
    RELEASED,
    Decision,
    decide,
    retry_delay,
)
from receipts.delivery.providers import ProviderAnswer, classify_response
from receipts.vocabulary import AttemptOutcome, ReviewReason, RowStatus

SETTINGS = Settings(retry_base_seconds=15.0, retry_max_seconds=3600.0)


def http(status: int, body: dict[str, Any] | None = None, **headers: str) -> ProviderAnswer:
    """The answer ``ResendProvider`` gives for one HTTP response."""
    return classify_response(status, headers, json.dumps(body or {}).encode())


def error(status: int, name: str, **headers: str) -> ProviderAnswer:
    """A Resend error response: ``{"statusCode", "name", "message"}``."""
    return http(status, {"statusCode": status, "name": name, "message": "free text"}, **headers)


@dataclass(frozen=True)
class Row:
    """One row of the table: what the answer must do."""

    status: RowStatus
    outcome: AttemptOutcome
    review_reason: str | None = None
    last_error: str | None = None
    refunded: bool = False
    retry_between: tuple[float, float] | None = None  # seconds until ready again
    pause: float = 0.0
    stops_run: bool = False
    provider_id: str | None = None
    http_status: int | None = None


def retry(
    last_error: str | None, http_status: int | None, *, at_least: float = 7.5, pause: float = 0.0
) -> Row:
    """Pending again after the first backoff (15 s, half jittered) or Retry-After."""
    return Row(
        status=RowStatus.PENDING,
        outcome=AttemptOutcome.RETRY,
        last_error=last_error,
        retry_between=(at_least, max(at_least, 15.0)),
        pause=pause,
        http_status=http_status,
    )


def review(reason: str, http_status: int) -> Row:
    return Row(
        status=RowStatus.REVIEW,
        outcome=AttemptOutcome.REVIEW,
        review_reason=reason,
        last_error=reason,
        http_status=http_status,
    )


def refused(http_status: int, name: str) -> Row:
    return Row(
        status=RowStatus.PENDING,
        outcome=AttemptOutcome.CONFIG_ERROR,
        last_error=name,
        refunded=True,
        retry_between=(0.0, 0.0),
        stops_run=True,
        http_status=http_status,
    )


TABLE = [
    pytest.param(
        http(200, {"id": "re_123"}),
        Row(RowStatus.SENT, AttemptOutcome.SENT, provider_id="re_123", http_status=200),
        id="2xx-with-id",
    ),
    pytest.param(http(200, {}), retry("no_provider_id", 200), id="2xx-without-id"),
    pytest.param(
        ProviderAnswer(kind="retry", error="timeout"), retry("timeout", None), id="timeout"
    ),
    pytest.param(
        ProviderAnswer(kind="retry", error="connection_error"),
        retry("connection_error", None),
        id="network-error",
    ),
    pytest.param(
        error(429, "rate_limit_exceeded", **{"Retry-After": "120"}),
        retry("rate_limit_exceeded", 429, at_least=120.0, pause=120.0),
        id="429-with-retry-after",
    ),
    pytest.param(
        error(429, "rate_limit_exceeded", **{"Retry-After": "86400"}),
        retry("rate_limit_exceeded", 429, at_least=3600.0, pause=86400.0),
        id="429-retry-after-capped-for-the-row",
    ),
    pytest.param(
        error(429, "rate_limit_exceeded"),
        retry("rate_limit_exceeded", 429, pause=DEFAULT_RATE_LIMIT_PAUSE),
        id="429-without-retry-after",
    ),
    pytest.param(
        error(429, "daily_quota_exceeded", **{"ratelimit-reset": "30"}),
        retry("daily_quota_exceeded", 429, pause=30.0),
        id="429-with-ratelimit-reset",
    ),
    pytest.param(http(500), retry("http_500", 500), id="5xx"),
    pytest.param(error(503, "service_unavailable"), retry("service_unavailable", 503), id="503"),
    pytest.param(error(408, "request_timeout"), retry("request_timeout", 408), id="408"),
    pytest.param(
        error(409, "concurrent_idempotent_requests"),
        retry("concurrent_idempotent_requests", 409),
        id="409-key-in-progress",
    ),
    pytest.param(
        error(409, "invalid_idempotent_request"),
        review("invalid_idempotent_request", 409),
        id="409-key-reused-with-another-body",
    ),
    pytest.param(
        error(422, "invalid_idempotent_request"),
        review("invalid_idempotent_request", 422),
        id="422-key-reused-with-another-body",
    ),
    pytest.param(error(422, "validation_error"), review("validation_error", 422), id="422"),
    pytest.param(http(404), review("http_404", 404), id="other-4xx-without-a-name"),
    pytest.param(
        ProviderAnswer(kind="rejected"),
        Row(RowStatus.REVIEW, AttemptOutcome.REVIEW, review_reason=ReviewReason.PROVIDER_REJECTED),
        id="rejected-without-an-error-name",
    ),
    pytest.param(error(401, "missing_api_key"), refused(401, "missing_api_key"), id="401"),
    pytest.param(error(403, "invalid_api_key"), refused(403, "invalid_api_key"), id="403"),
]


@pytest.mark.parametrize(("answer", "expected"), TABLE)
def test_each_answer_decides_the_row_the_pace_and_the_run(
    answer: ProviderAnswer, expected: Row
) -> None:
    """One row of the table: the row's next state, the attempt's outcome and
    refund, the pause of every send, and whether the run stops (exit 2,
    naming RESEND_API_KEY); all returned, nothing set anywhere."""
    decision = decide(answer, 1, SETTINGS)
    result = decision.result
    assert (result.status, result.outcome) == (expected.status, expected.outcome)
    assert result.review_reason == expected.review_reason
    assert result.last_error == expected.last_error
    assert result.refund_attempt is expected.refunded
    assert result.provider_id == expected.provider_id
    assert result.http_status == expected.http_status
    assert result.provider_error == answer.error
    if expected.retry_between is not None:
        low, high = expected.retry_between
        assert low <= result.retry_in_seconds <= high
    assert decision.pause_sends == expected.pause
    if expected.stops_run:
        assert decision.stop is not None and decision.stop.exit_code == 2
        assert "RESEND_API_KEY" in decision.stop.error
        assert str(expected.http_status) in decision.stop.error
    else:
        assert decision.stop is None


def test_an_exhausted_rate_limit_window_pauses_sends_even_after_a_success() -> None:
    """``ratelimit-remaining: 0`` on an accepted send: the row is sent, and
    every send waits for ``ratelimit-reset``."""
    answer = http(200, {"id": "re_1"}, **{"ratelimit-remaining": "0", "ratelimit-reset": "2"})
    decision = decide(answer, 1, SETTINGS)
    assert decision.result.status == RowStatus.SENT and decision.pause_sends == 2.0


def test_the_retry_delay_grows_with_the_attempt_number() -> None:
    """The attempt number the claim made picks the backoff step (attempt 3: 60 s)."""
    decision = decide(http(500), 3, SETTINGS, rng=random.Random(7))
    assert 30.0 <= decision.result.retry_in_seconds <= 60.0


def test_the_same_answer_and_seed_decide_the_same() -> None:
    """Given its random source, the decision is a pure function of its inputs."""
    first = decide(http(503), 2, SETTINGS, rng=random.Random(1))
    again = decide(http(503), 2, SETTINGS, rng=random.Random(1))
    assert first == again and isinstance(first, Decision)


def test_a_released_row_is_pending_at_once_with_its_attempt_refunded() -> None:
    """Claimed but never sent (stop, or no send slot inside the lease)."""
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
