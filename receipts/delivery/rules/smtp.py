"""An SMTP server's answers, by reply code (RFC 5321 §4.2) and by where the session failed.

The SMTP provider (``receipts.delivery.providers.smtp``) names each failure:

* ``ambiguous_smtp_send``: the whole message and its final ``.`` went out and
  no reply came (connection lost, timeout). RFC 5321 §4.1.5 warns that a
  retry can deliver it twice: a person decides, it is never retried.
* ``smtp_<code>``: the server replied ``code`` to the envelope or to the
  message: 4xx is a temporary refusal (retried), 5xx a refusal of this
  message (review, with the server's reply kept as the attempt's message).
* the session could not be set up the way ``SMTP_URL`` says: the TLS
  handshake, STARTTLS, AUTH, or the sender refused (every message would fail
  the same way): configuration.
* no connection, or a failure before the message was handed over: nothing
  was sent, so it is retried.
"""

from __future__ import annotations

from receipts.delivery.answers import ProviderAnswer
from receipts.delivery.rules import AnswerTable, Reaction, Rule

AMBIGUOUS = "ambiguous_smtp_send"
_URL = "check SMTP_URL: host, port, and smtp:// (plain or ?starttls=true) or smtps:// (TLS)"
_AUTH = "check SMTP_URL: the server refused its user name and password"
_TLS = "check SMTP_URL: the TLS handshake failed (certificate, or smtps:// to a plain port)"
_STARTTLS = "check SMTP_URL: the server does not offer STARTTLS; use smtps:// or drop ?starttls"
_NO_AUTH = "check SMTP_URL: the server offers no AUTH over this connection (try ?starttls=true)"
_SENDER = "check EMAIL_FROM: the SMTP server refuses it as the sender"

# Names the provider gives failures that are not one reply to one message.
SMTP_FAILURES: dict[str, Rule] = {
    AMBIGUOUS: Rule(Reaction.REVIEW),
    "smtp_auth_failed": Rule(Reaction.CONFIGURATION, _AUTH),
    "smtp_auth_not_offered": Rule(Reaction.CONFIGURATION, _NO_AUTH),
    "smtp_tls_failed": Rule(Reaction.CONFIGURATION, _TLS),
    "smtp_starttls_not_offered": Rule(Reaction.CONFIGURATION, _STARTTLS),
    "smtp_sender_refused": Rule(Reaction.CONFIGURATION, _SENDER),
    "smtp_not_smtp": Rule(Reaction.CONFIGURATION, _URL),
}


def reaction_to(answer: ProviderAnswer) -> Rule:
    """What an SMTP outcome is: a named failure, else its reply code."""
    if answer.accepted:
        return Rule(Reaction.SENT)
    named = SMTP_FAILURES.get(answer.error or "")
    if named is not None:
        return named
    code = answer.reply_code
    if code is None:
        return Rule(Reaction.RETRY)  # nothing was handed over: no connection, a timeout before
    if 400 <= code < 500:
        return Rule(Reaction.RETRY)
    if 500 <= code < 600:
        return Rule(Reaction.REVIEW)
    return Rule(Reaction.RETRY)


SMTP = AnswerTable(provider="smtp", reaction_to=reaction_to)
