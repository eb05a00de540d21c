"""SMTP: any relay (Amazon SES's SMTP interface, Mailgun, SendGrid, a server of your own).

SMTP has no idempotency key and no way to ask whether a message arrived.
What can be known is where a session stopped. Before the server has the
whole message (connect, TLS, AUTH, ``MAIL``, ``RCPT``, ``DATA``, and while
the message is written) nothing was delivered: a retry is safe. Once the
message and its final ``.`` have gone out, the server may have taken
responsibility for it (RFC 5321 §4.1.5, §6.1); if no reply comes then (the
connection is lost, the read times out) nobody can say whether it did, and a
retry could deliver it twice. That is ``ambiguous_smtp_send``: the row goes
to review, never retried on its own. The honest guarantee: at most once,
with the ambiguous case in front of a person.

Each message carries a ``Message-ID`` derived from its key
(``receipts.delivery.providers.message``), the same on every attempt; it is
the ``provider_id`` stored for an accepted message. One connection per send:
receipts are few, and a session that ended cleanly leaves nothing to doubt.
"""

from __future__ import annotations

import smtplib
import ssl
from datetime import datetime
from email.message import EmailMessage

from receipts.delivery.answers import CONNECTION_ERROR, TIMEOUT, ProviderAnswer, one_line
from receipts.delivery.providers.base import NOT_SUPPORTED, Guarantee, Lookup, Protection
from receipts.delivery.providers.message import build_email, envelope
from receipts.delivery.rules.smtp import AMBIGUOUS, SMTP
from receipts.environment import SmtpTarget

GUARANTEE = Guarantee(
    protection=Protection.NONE,
    window_hours=None,
    can_look_up=False,
    retry_may_hide_acceptance=False,
)
# Where the session failed, for the answer: nothing handed over, or the whole message.
_BEFORE_DATA = "before"
_AWAITING_REPLY = "awaiting_reply"


class SmtpFailure(Exception):
    """A session step failed; ``answer`` says how."""

    def __init__(self, answer: ProviderAnswer) -> None:
        super().__init__(answer.error)
        self.answer = answer


class SmtpProvider:
    """Sends each message in a session of its own to ``target``; see the module docstring."""

    name = "smtp"
    default_rate = 0.0  # relays state no common rate; 421/4xx answers are retried
    guarantee = GUARANTEE
    answers = SMTP

    def __init__(
        self,
        target: SmtpTarget,
        *,
        connect_timeout: float,
        read_timeout: float,
        local_hostname: str | None = None,
    ) -> None:
        self.target = target
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._local_hostname = local_hostname
        self._tls = ssl.create_default_context()

    def send(self, message_key: str, payload: bytes) -> ProviderAnswer:
        try:
            message = build_email(message_key, payload)
            sender, recipients = envelope(message)
        except (ValueError, IndexError, AttributeError):
            return ProviderAnswer(error="invalid_payload", reply_code=554)
        stage = [_BEFORE_DATA]
        session: smtplib.SMTP | None = None
        try:
            session = self._session()
            reply = self._transmit(session, message, sender, recipients, stage)
        except SmtpFailure as failure:
            return failure.answer
        except (smtplib.SMTPException, OSError) as error:
            return _lost(stage[0], error)
        finally:
            if session is not None:
                _quit_quietly(session)
        return ProviderAnswer(
            provider_id=str(message["Message-ID"]), reply_code=reply[0], message=reply[1]
        )

    def _session(self) -> smtplib.SMTP:
        """Connected, greeted, secured and logged in as ``SMTP_URL`` says."""
        target = self.target
        try:
            if target.implicit_tls:
                session: smtplib.SMTP = smtplib.SMTP_SSL(
                    target.host,
                    target.port,
                    local_hostname=self._local_hostname,
                    timeout=self._connect_timeout,
                    context=self._tls,
                )
            else:
                session = smtplib.SMTP(
                    target.host,
                    target.port,
                    local_hostname=self._local_hostname,
                    timeout=self._connect_timeout,
                )
        except ssl.SSLError as error:
            raise SmtpFailure(
                ProviderAnswer(error="smtp_tls_failed", message=one_line(str(error)))
            ) from None
        except smtplib.SMTPConnectError as error:
            raise SmtpFailure(_refusal(error.smtp_code, error.smtp_error)) from None
        except TimeoutError:
            raise SmtpFailure(ProviderAnswer(error=TIMEOUT)) from None
        except (OSError, smtplib.SMTPException):
            raise SmtpFailure(ProviderAnswer(error=CONNECTION_ERROR)) from None
        if session.sock is not None:
            session.sock.settimeout(self._read_timeout)
        try:
            self._secure_and_log_in(session)
        except BaseException:
            session.close()
            raise
        return session

    def _secure_and_log_in(self, session: smtplib.SMTP) -> None:
        target = self.target
        try:
            session.ehlo_or_helo_if_needed()
            if target.starttls:
                if not session.has_extn("starttls"):
                    raise SmtpFailure(ProviderAnswer(error="smtp_starttls_not_offered"))
                session.starttls(context=self._tls)
                session.ehlo()
            if target.username:
                if not session.has_extn("auth"):
                    raise SmtpFailure(ProviderAnswer(error="smtp_auth_not_offered"))
                session.login(target.username, target.password or "")
        except smtplib.SMTPAuthenticationError as error:
            raise SmtpFailure(
                _named("smtp_auth_failed", error.smtp_code, error.smtp_error)
            ) from None
        except smtplib.SMTPHeloError as error:
            raise SmtpFailure(_refusal(error.smtp_code, error.smtp_error)) from None
        except ssl.SSLError as error:
            raise SmtpFailure(
                ProviderAnswer(error="smtp_tls_failed", message=one_line(str(error)))
            ) from None
        except smtplib.SMTPNotSupportedError:
            raise SmtpFailure(ProviderAnswer(error="smtp_auth_not_offered")) from None
        except smtplib.SMTPResponseException as error:
            raise SmtpFailure(_refusal(error.smtp_code, error.smtp_error)) from None

    def _transmit(
        self,
        session: smtplib.SMTP,
        message: EmailMessage,
        sender: str,
        recipients: list[str],
        stage: list[str],
    ) -> tuple[int, str]:
        """MAIL, RCPT, DATA, the message, then the reply to its final ``.``."""
        code, reply = session.mail(sender)
        if code != 250:
            raise SmtpFailure(_sender_refusal(code, reply))
        for recipient in recipients:
            code, reply = session.rcpt(recipient)
            if code not in (250, 251):
                raise SmtpFailure(_refusal(code, reply))
        code, reply = session.docmd("DATA")
        if code != 354:
            raise SmtpFailure(_refusal(code, reply))
        session.send(_dot_stuffed(message.as_bytes()))
        stage[0] = _AWAITING_REPLY
        code, reply = session.getreply()
        if code != 250:
            # A reply is an answer: the server did not take the message.
            raise SmtpFailure(_refusal(code, reply))
        stage[0] = _BEFORE_DATA  # accepted: what follows (QUIT) cannot change that
        return code, reply.decode("utf-8", "replace")

    def look_up(
        self, message_key: str, payload: bytes, *, since: datetime, deadline: float
    ) -> Lookup:
        return NOT_SUPPORTED  # SMTP cannot be asked what it accepted

    def close(self) -> None:
        pass


def _quit_quietly(session: smtplib.SMTP) -> None:
    """End the session; whatever QUIT answers cannot change what the message got."""
    try:
        session.quit()
    except (smtplib.SMTPException, OSError):
        session.close()


def _dot_stuffed(content: bytes) -> bytes:
    """The message as DATA carries it (RFC 5321 §4.5.2), ending with ``CRLF.CRLF``."""
    text = smtplib.quotedata(content.decode("utf-8", "surrogateescape")).encode(
        "utf-8", "surrogateescape"
    )
    if not text.endswith(b"\r\n"):
        text += b"\r\n"
    return text + b".\r\n"


def _lost(stage: str, error: BaseException) -> ProviderAnswer:
    """The connection failed: before the message was handed over, nothing was sent."""
    if stage == _AWAITING_REPLY:
        timed_out = isinstance(error, TimeoutError) or "timed out" in str(error)
        what = "timed out" if timed_out else "lost"
        return ProviderAnswer(
            error=AMBIGUOUS,
            message=f"the connection was {what} after the whole message was sent",
        )
    return ProviderAnswer(error=TIMEOUT if isinstance(error, TimeoutError) else CONNECTION_ERROR)


def _refusal(code: int, reply: bytes | str) -> ProviderAnswer:
    return _named(f"smtp_{code}", code, reply)


def _sender_refusal(code: int, reply: bytes) -> ProviderAnswer:
    """A 5xx to MAIL FROM refuses our sender, for every message: configuration."""
    if 500 <= code < 600:
        return _named("smtp_sender_refused", code, reply)
    return _refusal(code, reply)


def _named(name: str, code: int, reply: bytes | str) -> ProviderAnswer:
    text = reply.decode("utf-8", "replace") if isinstance(reply, bytes) else reply
    return ProviderAnswer(error=name, reply_code=code, message=one_line(f"{code} {text}"))
