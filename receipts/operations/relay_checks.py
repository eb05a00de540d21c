"""What ``receipts doctor`` asks Postmark and an SMTP server; nothing is sent.

Postmark: the server token is accepted (``GET /server``) and the message
stream exists and is transactional (``GET /message-streams/<id>``; Postmark
API reference, "Server" and "Message streams"). Sender signatures and
domains are visible only to an account token, so they are not checked.
SMTP: a session as the worker opens it (connect, ``EHLO``, STARTTLS and AUTH
as ``SMTP_URL`` says), ended with ``QUIT`` before any message.
"""

from __future__ import annotations

import contextlib
import smtplib
import ssl
from typing import Any

import requests

from receipts.config import Settings
from receipts.operations.checks import Check

_TIMEOUT = (5.0, 10.0)


def postmark_checks(settings: Settings) -> list[Check]:
    """``postmark-token`` and ``postmark-stream``."""
    token = settings.postmark_server_token
    if not token:
        detail = "POSTMARK_SERVER_TOKEN is not set: the worker cannot send"
        return [Check(name="postmark-token", ok=False, detail=detail)]
    server = _ask_postmark(settings, "/server")
    if server.get("status") != 200:
        problem = _postmark_problem(server)
        return [
            Check(name="postmark-token", ok=False, detail=problem),
            Check(name="postmark-stream", ok=False, detail="not checked: the token was refused"),
        ]
    name = (server.get("body") or {}).get("Name")
    accepted = Check(
        name="postmark-token",
        ok=True,
        detail=f"accepted by {settings.postmark_api_url} (server {name!r}); sender signatures "
        "are not checked: Postmark shows them to an account token only",
    )
    stream = settings.postmark_message_stream
    found = _ask_postmark(settings, f"/message-streams/{stream}")
    kind = (found.get("body") or {}).get("MessageStreamType")
    if found.get("status") == 200 and kind == "Transactional":
        return [
            accepted,
            Check(name="postmark-stream", ok=True, detail=f"{stream} is transactional"),
        ]
    if found.get("status") == 200:
        detail = f"{stream} is a {kind} stream: receipts belong on a transactional one"
    else:
        detail = (
            f"{stream} (POSTMARK_MESSAGE_STREAM) is not a stream of this server: "
            f"{_postmark_problem(found)}"
        )
    return [accepted, Check(name="postmark-stream", ok=False, detail=detail)]


def _ask_postmark(settings: Settings, path: str) -> dict[str, Any]:
    assert settings.postmark_server_token is not None
    headers = {
        "Accept": "application/json",
        "X-Postmark-Server-Token": settings.postmark_server_token,
    }
    try:
        response = requests.get(
            settings.postmark_api_url + path,
            headers=headers,
            timeout=_TIMEOUT,
            allow_redirects=False,
        )
    except requests.RequestException as exc:
        return {"status": None, "error": type(exc).__name__}
    try:
        body = response.json()
    except ValueError:
        body = {}
    return {"status": response.status_code, "body": body if isinstance(body, dict) else {}}


def _postmark_problem(answer: dict[str, Any]) -> str:
    if answer.get("status") is None:
        return f"Postmark did not answer: {answer.get('error')}"
    body = answer.get("body") or {}
    said = f"ErrorCode {body.get('ErrorCode')}: {str(body.get('Message') or '')[:200]}"
    if answer["status"] == 401:
        return f"Postmark refused POSTMARK_SERVER_TOKEN (HTTP 401 {said})"
    return f"Postmark answered HTTP {answer['status']} {said} (is POSTMARK_API_URL right?)"


def smtp_check(settings: Settings) -> Check:
    """``smtp-login``: a session as the worker opens it, ended before any message."""
    target = settings.smtp
    if target is None:
        return Check(
            name="smtp-login", ok=False, detail="SMTP_URL is not set: the worker cannot send"
        )
    context = ssl.create_default_context()
    session: smtplib.SMTP | None = None
    try:
        if target.implicit_tls:
            session = smtplib.SMTP_SSL(target.host, target.port, timeout=10, context=context)
        else:
            session = smtplib.SMTP(target.host, target.port, timeout=10)
        code, greeting = session.ehlo()
        if code != 250:
            raise smtplib.SMTPHeloError(code, greeting)
        steps = ["EHLO"]
        if target.starttls:
            session.starttls(context=context)
            session.ehlo()
            steps.append("STARTTLS")
        if target.username:
            session.login(target.username, target.password or "")
            steps.append(f"AUTH as {target.username}")
    except (smtplib.SMTPException, OSError) as error:
        return Check(
            name="smtp-login", ok=False, detail=f"{target.where()}: {_smtp_problem(error)}"
        )
    finally:
        if session is not None:
            with contextlib.suppress(smtplib.SMTPException, OSError):
                session.quit()
    server = greeting.decode("utf-8", "replace").splitlines()[0] if greeting else "?"
    return Check(
        name="smtp-login",
        ok=True,
        detail=f"{target.where()}: {', '.join(steps)} accepted by {server}",
    )


def _smtp_problem(error: BaseException) -> str:
    if isinstance(error, smtplib.SMTPAuthenticationError):
        return "the server refused the user name and password (AUTH)"
    if isinstance(error, smtplib.SMTPNotSupportedError):
        return f"the server does not offer this ({error}): check starttls and AUTH in SMTP_URL"
    if isinstance(error, ssl.SSLError):
        return f"the TLS handshake failed ({error.reason or error})"
    if isinstance(error, smtplib.SMTPResponseException):
        reply = error.smtp_error
        text = reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)
        return f"the server answered {error.smtp_code} {text}"
    return f"cannot connect ({type(error).__name__}: {error})"
