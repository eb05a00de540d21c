"""What an attempt does about an earlier attempt that may have been accepted (lookups.py).

Pure: a claimed row (its latest attempt that may have reached the provider,
whether it is past a limit, any webhook evidence) and a provider's guarantee
in; a plan, and after asking, the attempt's result, out.
"""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime

import pytest

from receipts.config import Settings
from receipts.delivery import lookups
from receipts.delivery.claims import ClaimedRow, PriorAttempt
from receipts.delivery.providers.base import Guarantee, Lookup
from receipts.delivery.providers.file_sink import GUARANTEE as SINK
from receipts.delivery.providers.postmark import PostmarkProvider
from receipts.delivery.providers.resend import GUARANTEE as RESEND
from receipts.delivery.providers.smtp import GUARANTEE as SMTP
from receipts.vocabulary import AttemptOutcome, ReviewReason, RowStatus

POSTMARK = PostmarkProvider(
    api_url="https://api.postmarkapp.invalid",
    server_token="t",
    message_stream="outbound",
    retention_days=45,
    search_lag_seconds=60,
    connect_timeout=1,
    read_timeout=1,
).guarantee
SETTINGS = Settings(retry_base_seconds=10.0, retry_max_seconds=100.0)


def row(
    prior: PriorAttempt | None = None,
    *,
    past_limit: ReviewReason | None = None,
    evidence_id: str | None = None,
) -> ClaimedRow:
    return ClaimedRow(
        message_key="platform/test/in_1Lookup/invoice-paid",
        lease_token=uuid.uuid4(),
        attempt=2,
        attempt_id=7,
        payload=b"{}",
        first_attempt_at=datetime(2026, 11, 30, tzinfo=UTC),
        prior=prior,
        past_limit=past_limit,
        evidence_id=evidence_id,
    )


def prior(
    outcome: str | None, http_status: int | None = None, error: str | None = None, age: float = 120
) -> PriorAttempt:
    return PriorAttempt(outcome=outcome, http_status=http_status, provider_error=error,
                        age_seconds=age)  # fmt: skip


UNFINISHED = prior(None)
TIMED_OUT = prior("retry", None, "timeout")
SERVER_ERROR = prior("retry", 503, "http_503")
NO_ID = prior("retry", 200, "no_provider_id")
REFUSED_FOR_NOW = prior("retry", 409, "concurrent_idempotent_requests")
LOOKUP_FAILED = prior("retry", 503, "lookup_http_503")


@pytest.mark.parametrize(
    ("earlier", "open_for_http", "open_for_smtp"),
    [
        (None, False, False),
        (UNFINISHED, True, True),
        (prior("lease_lost", 200), True, True),
        (TIMED_OUT, True, False),  # SMTP records a timeout as retry only before DATA
        (SERVER_ERROR, True, False),
        (NO_ID, True, False),
        (REFUSED_FOR_NOW, False, False),
        (LOOKUP_FAILED, True, True),
    ],
)
def test_which_earlier_attempts_may_hide_an_accepted_send(
    earlier: PriorAttempt | None, open_for_http: bool, open_for_smtp: bool
) -> None:
    assert lookups.may_hide_acceptance(earlier, POSTMARK) is open_for_http
    assert lookups.may_hide_acceptance(earlier, SMTP) is open_for_smtp


@pytest.mark.parametrize(
    ("guarantee", "earlier", "step"),
    [
        (RESEND, None, "send"),
        (RESEND, UNFINISHED, "send"),  # the idempotency key absorbs it
        (SINK, UNFINISHED, "send"),
        (POSTMARK, None, "send"),
        (POSTMARK, UNFINISHED, "look_up"),
        (POSTMARK, TIMED_OUT, "look_up"),
        (POSTMARK, prior(None, age=20), "wait"),
        (SMTP, None, "send"),
        (SMTP, TIMED_OUT, "send"),
        (SMTP, UNFINISHED, "review"),
    ],
)
def test_the_plan_follows_the_providers_guarantee(
    guarantee: Guarantee, earlier: PriorAttempt | None, step: str
) -> None:
    assert lookups.plan(row(earlier), guarantee).step == step


def test_postmark_waits_the_rest_of_the_search_lag() -> None:
    chosen = lookups.plan(row(prior(None, age=20)), POSTMARK)
    assert chosen.wait_seconds == 40
    result = lookups.without_sending(row(), chosen)
    assert (result.status, result.outcome, result.retry_in_seconds) == (
        RowStatus.PENDING, AttemptOutcome.RELEASED, 40,
    )  # fmt: skip
    assert result.refund_attempt


def test_smtp_sends_an_open_question_to_review_unsent() -> None:
    result = lookups.without_sending(row(UNFINISHED), lookups.plan(row(UNFINISHED), SMTP))
    assert (result.status, result.review_reason, result.outcome) == (
        RowStatus.REVIEW, "ambiguous_smtp_send", AttemptOutcome.REVIEW,
    )  # fmt: skip
    assert result.refund_attempt and "cannot be asked" in (result.provider_message or "")


def test_past_a_limit_the_provider_is_asked_only_about_an_open_question() -> None:
    cutoff = ReviewReason.RETRY_WINDOW_ELAPSED
    assert lookups.plan(row(UNFINISHED, past_limit=cutoff), RESEND).step == "look_up"
    closed = lookups.plan(row(REFUSED_FOR_NOW, past_limit=cutoff), RESEND)
    assert (closed.step, closed.review_reason) == ("review", cutoff)
    assert lookups.plan(row(UNFINISHED, past_limit=cutoff), SMTP).step == "review"


def test_webhook_evidence_answers_without_asking() -> None:
    with_evidence = row(UNFINISHED, evidence_id="re_evidence", past_limit=None)
    assert lookups.plan(with_evidence, SMTP).step == "look_up"
    found = lookups.evidence_lookup(with_evidence)
    assert found is not None
    result = lookups.after_lookup(with_evidence, found, SETTINGS)
    assert result is not None and (result.status, result.provider_id) == ("sent", "re_evidence")
    assert "delivery webhook" in (result.provider_message or "")


@pytest.mark.parametrize(
    ("past_limit", "found", "status", "outcome", "reason"),
    [
        (None, Lookup(provider_id="pm-1", http_status=200, searched="S"), "sent", "sent", None),
        (None, Lookup(http_status=200, searched="S"), None, None, None),  # not found: send
        (None, Lookup(error="lookup_timeout", searched="S"), "pending", "retry", None),
        # Refused for good inside the limits: a person decides, the attempt not counted.
        (None, Lookup(error="lookup_http_418", permanent=True, searched="S"), "review",
         "review", "lookup_http_418"),
        # Refused because of our configuration: the row waits for the fixed run.
        (None, Lookup(error="lookup_bad_or_missing_api_token", http_status=401, permanent=True,
                      fix="check POSTMARK_SERVER_TOKEN", searched="S"), "pending",
         "config_error", None),
        (ReviewReason.RETRY_WINDOW_ELAPSED,
         Lookup(error="lookup_invalid_api_key", http_status=403, permanent=True,
                fix="check RESEND_API_KEY", searched="S"), "pending", "config_error", None),
        (ReviewReason.RETRY_WINDOW_ELAPSED, Lookup(http_status=200, searched="S"), "review",
         "skipped_cutoff", "retry_window_elapsed"),
        (ReviewReason.ATTEMPTS_EXHAUSTED, Lookup(http_status=200, searched="S"), "review",
         "skipped_budget", "attempts_exhausted"),
        (ReviewReason.RETRY_WINDOW_ELAPSED,
         Lookup(error="lookup_restricted_api_key", permanent=True, searched="S"), "review",
         "skipped_cutoff", "retry_window_elapsed"),
        (ReviewReason.RETRY_WINDOW_ELAPSED, Lookup(error="lookup_timeout", searched="S"),
         "pending", "retry", None),
        (ReviewReason.RETRY_WINDOW_ELAPSED, Lookup(provider_id="re-1", searched="S"), "sent",
         "sent", None),
    ],
)  # fmt: skip
def test_after_asking(
    past_limit: ReviewReason | None,
    found: Lookup,
    status: str | None,
    outcome: str | None,
    reason: str | None,
) -> None:
    result = lookups.after_lookup(
        row(UNFINISHED, past_limit=past_limit), found, SETTINGS, rng=random.Random(1)
    )
    if status is None:
        assert result is None
        return
    assert result is not None
    assert (result.status, result.outcome, result.review_reason) == (status, outcome, reason)
    if outcome == "retry":
        # The question stays open for the next claim, whatever the lookup said.
        assert (result.provider_error or "").startswith("lookup_")
        assert 5.0 <= result.retry_in_seconds <= 20.0 and not result.refund_attempt
    if status == "review" or outcome == "config_error":
        assert result.refund_attempt  # nothing was sent
    assert (lookups.run_stop(found) is not None) is (outcome == "config_error")


def test_a_lookup_refused_for_our_configuration_stops_the_run_naming_the_setting() -> None:
    found = Lookup(error="lookup_bad_or_missing_api_token", http_status=401, permanent=True,
                   fix="check POSTMARK_SERVER_TOKEN: missing", searched="the search")  # fmt: skip
    stop = lookups.run_stop(found)
    assert stop is not None and stop.exit_code == 2
    assert "HTTP 401 lookup_bad_or_missing_api_token" in stop.error
    assert stop.error.endswith("check POSTMARK_SERVER_TOKEN: missing")
    result = lookups.after_lookup(row(UNFINISHED), found, SETTINGS)
    assert result is not None and result.provider_error == "lookup_bad_or_missing_api_token"
    assert "POSTMARK_SERVER_TOKEN" in (result.provider_message or "")
