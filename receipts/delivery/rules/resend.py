"""Resend's answers: every error name its API reference documents.

:data:`RESEND_ERRORS` holds every error name Resend documents (Resend API
reference, "Errors"), by (HTTP status, name); :func:`reaction_to` says what
any answer is, documented or not. docs/architecture.md, "What each provider
answer does", is the table in words.
"""

from __future__ import annotations

from receipts.delivery.answers import KEY_IN_PROGRESS, ProviderAnswer
from receipts.delivery.rules import AnswerTable, Reaction, Rule

API_KEY_FIX = "check RESEND_API_KEY: missing, revoked, or not a key of this Resend team"
API_URL_FIX = "check RESEND_API_URL: it must be Resend's API base, https://api.resend.com"
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
    (401, "missing_api_key"): Rule(Reaction.CONFIGURATION, API_KEY_FIX),
    (401, "restricted_api_key"): Rule(Reaction.CONFIGURATION, API_KEY_FIX),
    (401, "validation_error"): Rule(Reaction.CONFIGURATION, API_KEY_FIX),
    (403, "invalid_api_key"): Rule(Reaction.CONFIGURATION, API_KEY_FIX),
    (403, "validation_error"): Rule(Reaction.CONFIGURATION, _FROM_DOMAIN),
    (404, "not_found"): Rule(Reaction.CONFIGURATION, API_URL_FIX),
    (405, "method_not_allowed"): Rule(Reaction.CONFIGURATION, API_URL_FIX),
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
        return Rule(Reaction.CONFIGURATION, API_KEY_FIX)
    documented = RESEND_ERRORS.get((status, answer.error or ""))
    if documented is not None:
        return documented
    return _by_status(status, answer.error)


def _by_status(status: int, error: str | None) -> Rule:
    """An answer Resend does not document: unknown 4xx is the message's, 5xx a retry."""
    if status in (401, 403):
        return Rule(Reaction.CONFIGURATION, API_KEY_FIX)
    if 300 <= status < 400 or status in (404, 405):
        return Rule(Reaction.CONFIGURATION, API_URL_FIX)
    if status == 408 or (status == 409 and error == KEY_IN_PROGRESS):
        return Rule(Reaction.RETRY)
    if status == 429:
        return Rule(Reaction.RATE_LIMITED)
    if 400 <= status < 500:
        return Rule(Reaction.REVIEW)
    return Rule(Reaction.RETRY)


RESEND = AnswerTable(provider="resend", reaction_to=reaction_to)
