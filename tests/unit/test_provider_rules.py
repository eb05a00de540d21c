"""Postmark's and SMTP's answer tables, a row per documented error (Resend's: test_decisions.py).

Each Postmark case starts from the bytes Postmark answers (status and
``{"ErrorCode", "Message"}``, read by ``classify_postmark``); each SMTP case
from the answer ``SmtpProvider`` gives. Every case checks the whole decision
that matters to the row: its next state, the attempt's outcome, whether it is
refunded, and whether the run stops naming the setting to fix.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from receipts.config import Settings
from receipts.delivery.answers import ProviderAnswer
from receipts.delivery.decisions import decide
from receipts.delivery.providers.postmark import classify_postmark
from receipts.delivery.rules.postmark import POSTMARK_ERRORS, postmark_table
from receipts.delivery.rules.smtp import SMTP, SMTP_FAILURES
from receipts.vocabulary import AttemptOutcome, RowStatus

SETTINGS = Settings(retry_base_seconds=15.0, retry_max_seconds=3600.0)
NOW = datetime(2026, 11, 30, 21, 30, tzinfo=UTC)
POSTMARK = postmark_table(search_lag_seconds=60.0)

# (ErrorCode, Postmark's name for it, the row, the outcome, names this setting when it stops)
POSTMARK_ROWS = [
    (10, "Bad or missing API token", RowStatus.PENDING, "config_error", "POSTMARK_SERVER_TOKEN"),
    (100, "Maintenance", RowStatus.PENDING, "retry", None),
    (300, "Invalid email request", RowStatus.REVIEW, "review", None),
    (400, "Sender signature not found", RowStatus.PENDING, "config_error", "EMAIL_FROM"),
    (401, "Sender signature not confirmed", RowStatus.PENDING, "config_error", "EMAIL_FROM"),
    (402, "Invalid JSON", RowStatus.REVIEW, "review", None),
    (403, "Incompatible JSON", RowStatus.REVIEW, "review", None),
    (405, "Not allowed to send", RowStatus.PENDING, "config_error", "Postmark account"),
    (406, "Inactive recipient", RowStatus.REVIEW, "review", None),
    (409, "JSON required", RowStatus.REVIEW, "review", None),
    (410, "Too many batch messages", RowStatus.REVIEW, "review", None),
    (411, "Forbidden attachment type", RowStatus.REVIEW, "review", None),
    (412, "Account is pending", RowStatus.PENDING, "config_error", "Postmark account"),
    (413, "Account may not send", RowStatus.PENDING, "config_error", "Postmark account"),
    (429, "Rate limit exceeded", RowStatus.PENDING, "rate_limited", None),
    (1235, "The 'MessageStream' provided does not exist on this server.", RowStatus.PENDING,
     "config_error", "POSTMARK_MESSAGE_STREAM"),
    (1236, "Sending is not supported on the supplied 'MessageStream'.", RowStatus.PENDING,
     "config_error", "POSTMARK_MESSAGE_STREAM"),
]  # fmt: skip


def postmark_answer(status: int, document: dict[str, object], **headers: str) -> ProviderAnswer:
    return classify_postmark(status, headers, json.dumps(document).encode())


def test_every_documented_postmark_error_code_has_a_row() -> None:
    assert sorted(code for code, *_ in POSTMARK_ROWS) == sorted(POSTMARK_ERRORS)


@pytest.mark.parametrize(("code", "said", "status", "outcome", "names"), POSTMARK_ROWS)
def test_each_postmark_error_code_does_what_the_table_says(
    code: int, said: str, status: RowStatus, outcome: str, names: str | None
) -> None:
    http = 401 if code == 10 else 429 if code == 429 else 422
    decision = decide(
        postmark_answer(http, {"ErrorCode": code, "Message": said}), 1, SETTINGS, now=NOW,
        table=POSTMARK,
    )  # fmt: skip
    result = decision.result
    assert (result.status, result.outcome) == (status, outcome)
    assert result.provider_error == POSTMARK_ERRORS[code][0]
    assert result.provider_message == said
    assert result.refund_attempt == (outcome in ("config_error", "rate_limited"))
    if status == RowStatus.REVIEW:
        assert result.review_reason == POSTMARK_ERRORS[code][0]
    if names is None:
        assert decision.stop is None
    else:
        assert decision.stop is not None and names in decision.stop.error
        assert decision.stop.exit_code == 2


@pytest.mark.parametrize(
    ("status", "document", "row", "outcome", "error"),
    [
        (200, {"MessageID": "b7bc2f4a", "ErrorCode": 0, "Message": "OK"}, "sent", "sent", None),
        # Postmark has answered this way, without ErrorCode (django-anymail issue 392)
        (200, {"MessageID": "b7bc2f4a", "Message": "Message accepted, but delivery may be late."},
         "sent", "sent", None),
        (200, {"ErrorCode": 0, "Message": "OK"}, "pending", "retry", "no_provider_id"),
        (200, {"ErrorCode": 999, "Message": "?"}, "pending", "retry", "postmark_error_999"),
        (401, {}, "pending", "config_error", "http_401"),
        (404, {}, "pending", "config_error", "http_404"),
        (422, {"ErrorCode": 1234, "Message": "?"}, "review", "review", "postmark_error_1234"),
        (429, {}, "pending", "rate_limited", "http_429"),
        (500, {"ErrorCode": 0, "Message": "Internal"}, "pending", "retry", "http_500"),
        (503, {}, "pending", "retry", "http_503"),
    ],
)  # fmt: skip
def test_undocumented_postmark_answers_are_decided_by_their_status(
    status: int, document: dict[str, object], row: str, outcome: str, error: str | None
) -> None:
    result = decide(postmark_answer(status, document), 1, SETTINGS, now=NOW, table=POSTMARK).result
    assert (result.status, result.outcome, result.provider_error) == (row, outcome, error)
    if row == "sent":
        assert result.provider_id == "b7bc2f4a"


@pytest.mark.parametrize(
    "answer",
    [
        ProviderAnswer(error="timeout"),
        ProviderAnswer(error="connection_error"),
        postmark_answer(503, {}),
        postmark_answer(200, {"ErrorCode": 0, "Message": "OK"}),
    ],
    ids=["timeout", "connection", "5xx", "2xx-without-id"],
)
def test_a_postmark_retry_that_may_hide_an_acceptance_waits_for_the_search(
    answer: ProviderAnswer,
) -> None:
    """The next attempt asks the search first; it must be able to see the message."""
    result = decide(answer, 1, Settings(retry_base_seconds=1.0), now=NOW, table=POSTMARK).result
    assert result.outcome == AttemptOutcome.RETRY and result.retry_in_seconds >= 60.0


def test_a_postmark_rate_limit_honours_retry_after() -> None:
    limited = postmark_answer(
        429, {"ErrorCode": 429, "Message": "Rate limit exceeded"}, **{"Retry-After": "7"}
    )
    decision = decide(limited, 1, SETTINGS, now=NOW, table=POSTMARK)
    assert decision.pause_sends == 7.0 and decision.result.retry_in_seconds == 7.0


# --- SMTP -------------------------------------------------------------------------

SMTP_ROWS = [
    ("ambiguous_smtp_send", None, RowStatus.REVIEW, "review", None),
    ("smtp_auth_failed", 535, RowStatus.PENDING, "config_error", "SMTP_URL"),
    ("smtp_auth_not_offered", None, RowStatus.PENDING, "config_error", "SMTP_URL"),
    ("smtp_tls_failed", None, RowStatus.PENDING, "config_error", "SMTP_URL"),
    ("smtp_starttls_not_offered", None, RowStatus.PENDING, "config_error", "SMTP_URL"),
    ("smtp_sender_refused", 553, RowStatus.PENDING, "config_error", "EMAIL_FROM"),
    ("smtp_not_smtp", None, RowStatus.PENDING, "config_error", "SMTP_URL"),
    ("smtp_421", 421, RowStatus.PENDING, "retry", None),
    ("smtp_450", 450, RowStatus.PENDING, "retry", None),
    ("smtp_451", 451, RowStatus.PENDING, "retry", None),
    ("smtp_452", 452, RowStatus.PENDING, "retry", None),
    ("smtp_550", 550, RowStatus.REVIEW, "review", None),
    ("smtp_552", 552, RowStatus.REVIEW, "review", None),
    ("smtp_554", 554, RowStatus.REVIEW, "review", None),
    ("timeout", None, RowStatus.PENDING, "retry", None),
    ("connection_error", None, RowStatus.PENDING, "retry", None),
]


def test_every_named_smtp_failure_has_a_row() -> None:
    assert set(SMTP_FAILURES) <= {name for name, *_ in SMTP_ROWS}


@pytest.mark.parametrize(("error", "code", "status", "outcome", "names"), SMTP_ROWS)
def test_each_smtp_outcome_does_what_the_table_says(
    error: str, code: int | None, status: RowStatus, outcome: str, names: str | None
) -> None:
    answer = ProviderAnswer(error=error, reply_code=code, message=f"{code} the server's words")
    decision = decide(answer, 1, SETTINGS, now=NOW, table=SMTP)
    assert (decision.result.status, decision.result.outcome) == (status, outcome)
    if status == RowStatus.REVIEW:
        assert decision.result.review_reason == error
        assert decision.result.provider_message == f"{code} the server's words"
    assert (decision.stop is None) == (names is None)
    if names is not None:
        assert decision.stop is not None and names in decision.stop.error


def test_an_accepted_smtp_message_is_sent_with_its_message_id() -> None:
    answer = ProviderAnswer(provider_id="<abc@example.com>", reply_code=250, message="2.0.0 OK")
    result = decide(answer, 1, SETTINGS, now=NOW, table=SMTP).result
    assert (result.status, result.provider_id) == (RowStatus.SENT, "<abc@example.com>")


def test_the_readme_guarantee_table_says_what_goes_to_review_for_each_provider() -> None:
    """Per provider, the README's "what goes to review" column names the refusals of
    one message its table sends to review, and the two limits."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Providers and their guarantees", 1)[1].split("\n## ", 1)[0]
    rows = {
        line.split("|")[1].strip(): line.split("|")[4]
        for line in section.splitlines()
        if line.startswith("| ") and line.count("|") == 5
    }
    postmark_review = {name for name, rule in POSTMARK_ERRORS.values() if rule.reaction == "review"}
    assert {"inactive_recipient", "invalid_email_request"} <= postmark_review
    expected = {
        "Resend (`resend`)": ["invalid_parameter", "security_error"],
        "Postmark (`postmark`)": ["`inactive_recipient`", "`invalid_email_request`", "406", "300"],
        "SMTP (`smtp`)": ["`ambiguous_smtp_send`", "`smtp_5xx`", "final `.`"],
    }
    for provider, names in expected.items():
        review = rows[provider]
        for name in [*names, "`attempts_exhausted`", "`retry_window_elapsed`"]:
            assert name in review, (provider, name)
