"""Postmark's answers: every API error code its documentation lists for sending.

Postmark answers an error with an HTTP status and a body ``{"ErrorCode":
<number>, "Message": "…"}`` (Postmark API reference, "Overview": "HTTP
response codes" and "API error codes"). :data:`POSTMARK_ERRORS` names every
code that ``POST /email`` can answer and says what it is; :func:`reaction_to`
decides any answer, documented or not. A 200 with a ``MessageID`` is an
accepted message even without an ``ErrorCode`` (Postmark has answered
"Message accepted, but delivery may be delayed." that way; django-anymail
issue 392). ErrorCode 300 covers many request problems of one message (a bad
address, metadata too long: django-anymail issue 238), so it is the
message's, for a person.
"""

from __future__ import annotations

from receipts.delivery.answers import ProviderAnswer
from receipts.delivery.rules import AnswerTable, Reaction, Rule

TOKEN_FIX = "check POSTMARK_SERVER_TOKEN: missing, revoked, or not a server token"
TOKEN_ERROR_CODE = 10  # "Bad or missing API token"
_URL = "check POSTMARK_API_URL: it must be Postmark's API base, https://api.postmarkapp.com"
_SENDER = (
    "check EMAIL_FROM: its address or domain must be a confirmed sender signature "
    "of this Postmark account"
)
_ACCOUNT = "the Postmark account may not send now (pending approval, paused, or out of credits)"
_STREAM = (
    "check POSTMARK_MESSAGE_STREAM: it must be the ID of a transactional message stream "
    "of this Postmark server"
)

# Every ErrorCode Postmark documents for sending, by number: (our name, what it is).
POSTMARK_ERRORS: dict[int, tuple[str, Rule]] = {
    TOKEN_ERROR_CODE: ("bad_or_missing_api_token", Rule(Reaction.CONFIGURATION, TOKEN_FIX)),
    100: ("maintenance", Rule(Reaction.RETRY)),
    300: ("invalid_email_request", Rule(Reaction.REVIEW)),
    400: ("sender_signature_not_found", Rule(Reaction.CONFIGURATION, _SENDER)),
    401: ("sender_signature_not_confirmed", Rule(Reaction.CONFIGURATION, _SENDER)),
    402: ("invalid_json", Rule(Reaction.REVIEW)),
    403: ("incompatible_json", Rule(Reaction.REVIEW)),
    405: ("not_allowed_to_send", Rule(Reaction.CONFIGURATION, _ACCOUNT)),
    406: ("inactive_recipient", Rule(Reaction.REVIEW)),
    409: ("json_required", Rule(Reaction.REVIEW)),
    410: ("too_many_batch_messages", Rule(Reaction.REVIEW)),
    411: ("forbidden_attachment_type", Rule(Reaction.REVIEW)),
    412: ("account_is_pending", Rule(Reaction.CONFIGURATION, _ACCOUNT)),
    413: ("account_may_not_send", Rule(Reaction.CONFIGURATION, _ACCOUNT)),
    429: ("rate_limit_exceeded", Rule(Reaction.RATE_LIMITED)),
    # The configured stream, the same for every receipt: stop the run, not one row.
    1235: ("message_stream_not_found", Rule(Reaction.CONFIGURATION, _STREAM)),
    1236: ("message_stream_cannot_send", Rule(Reaction.CONFIGURATION, _STREAM)),
}
_BY_NAME = {name: rule for name, rule in POSTMARK_ERRORS.values()}


def error_name(code: int) -> str:
    """Our name for Postmark's ErrorCode ``code`` (``postmark_error_<n>`` if undocumented)."""
    known = POSTMARK_ERRORS.get(code)
    return known[0] if known is not None else f"postmark_error_{code}"


def reaction_to(answer: ProviderAnswer) -> Rule:
    """A documented ErrorCode by its name; anything else by its HTTP status."""
    status = answer.http_status
    if status is None:
        return Rule(Reaction.RETRY)  # no answer: timeout, connection error
    if 200 <= status < 300 and answer.error is None:
        return Rule(Reaction.SENT if answer.accepted else Reaction.RETRY)
    documented = _BY_NAME.get(answer.error or "")
    if documented is not None:
        return documented
    return _by_status(status)


def _by_status(status: int) -> Rule:
    if status == 401:
        return Rule(Reaction.CONFIGURATION, TOKEN_FIX)
    if 300 <= status < 400 or status in (404, 405):
        return Rule(Reaction.CONFIGURATION, _URL)
    if status == 408:
        return Rule(Reaction.RETRY)
    if status == 429:
        return Rule(Reaction.RATE_LIMITED)
    if 200 <= status < 300:
        return Rule(Reaction.RETRY)  # a 2xx naming an error we do not know: ask again
    if 400 <= status < 500:
        return Rule(Reaction.REVIEW)
    return Rule(Reaction.RETRY)


def postmark_table(search_lag_seconds: float) -> AnswerTable:
    """Postmark's table; a retry after an answer that may hide an accepted message
    waits until the outbound search can see it."""
    return AnswerTable(
        provider="postmark", reaction_to=reaction_to, retry_floor_seconds=search_lag_seconds
    )
