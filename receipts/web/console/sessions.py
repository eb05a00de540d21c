"""The console's session: one signed cookie, and the CSRF token every form carries.

The cookie holds who is logged in (or nobody, on the login page), the CSRF
token, when it was issued and a tag of the user's password hash, signed with
``RECEIPTS_CONSOLE_SECRET`` (``itsdangerous``, as Flask's own sessions). It
expires ``RECEIPTS_CONSOLE_SESSION_HOURS`` after login, by the console's
clock; changing a user's password, removing the user or changing the secret
ends their sessions. It is ``HttpOnly``, ``SameSite=Strict``, and ``Secure``
unless the console is opened over plain HTTP on this machine (``receipts
dev``), where a browser would not send a secure cookie back.

A form's ``csrf_token`` must equal the session's: a missing or wrong one is
refused with 403 before the view runs, so nothing changes.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from flask import Request, Response
from itsdangerous import BadSignature, URLSafeSerializer

from receipts.console_users import ConsoleUser
from receipts.web.console.context import Console

COOKIE = "receipts_console"
COOKIE_PATH = "/console"
CSRF_FIELD = "csrf_token"
_SALT = "receipts.console.session"
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")


@dataclass(frozen=True, kw_only=True)
class Session:
    """One browser's session; ``user`` is None until a login succeeds."""

    user: str | None
    csrf_token: str
    issued_at: datetime
    password_tag: str = ""

    @classmethod
    def fresh(cls, now: datetime) -> Session:
        return cls(user=None, csrf_token=secrets.token_urlsafe(32), issued_at=now)

    def logged_in(self, user: ConsoleUser, console: Console, now: datetime) -> Session:
        """A new session for ``user``: a new CSRF token, so one seen before login is useless."""
        return replace(Session.fresh(now), user=user.name, password_tag=password_tag(console, user))


def password_tag(console: Console, user: ConsoleUser) -> str:
    """A short keyed digest of the user's hash: a new password ends the old sessions."""
    digest = hmac.new(console.secret.encode(), user.password_hash.encode(), hashlib.sha256)
    return digest.hexdigest()[:16]


def _serializer(console: Console) -> URLSafeSerializer:
    return URLSafeSerializer(console.secret, salt=_SALT)


def lifetime(console: Console) -> timedelta:
    return timedelta(hours=console.settings.console_session_hours)


def load(console: Console, request: Request) -> Session | None:
    """The request's session if its cookie is genuine and unexpired, else None."""
    raw = request.cookies.get(COOKIE)
    if not raw:
        return None
    try:
        data: Any = _serializer(console).loads(raw)
        session = Session(
            user=data["u"],
            csrf_token=data["c"],
            issued_at=datetime.fromisoformat(data["t"]),
            password_tag=data.get("p", ""),
        )
    except (BadSignature, KeyError, TypeError, ValueError):
        return None
    if console.clock() - session.issued_at >= lifetime(console):
        return None
    return session


def current_user(console: Console, session: Session | None) -> ConsoleUser | None:
    """The session's user while it still exists with the same password."""
    if session is None:
        return None
    user = console.user(session.user)
    if user is None or not hmac.compare_digest(session.password_tag, password_tag(console, user)):
        return None
    return user


def store(console: Console, session: Session, request: Request, response: Response) -> None:
    value = _serializer(console).dumps(
        {
            "u": session.user,
            "c": session.csrf_token,
            "t": session.issued_at.isoformat(),
            "p": session.password_tag,
        }
    )
    remaining = lifetime(console) - (console.clock() - session.issued_at)
    response.set_cookie(
        COOKIE,
        value,
        max_age=max(0, int(remaining.total_seconds())),
        path=COOKIE_PATH,
        secure=needs_secure_cookie(request),
        httponly=True,
        samesite="Strict",
    )


def forget(request: Request, response: Response) -> None:
    response.delete_cookie(
        COOKIE,
        path=COOKIE_PATH,
        secure=needs_secure_cookie(request),
        httponly=True,
        samesite="Strict",
    )


def needs_secure_cookie(request: Request) -> bool:
    """Secure everywhere but plain HTTP to this machine itself."""
    if request.scheme == "https":
        return True
    host = request.host.rsplit(":", 1)[0] if not request.host.endswith("]") else request.host
    return host not in _LOCAL_HOSTS


def csrf_matches(session: Session | None, submitted: str | None) -> bool:
    if session is None or not submitted:
        return False
    return hmac.compare_digest(session.csrf_token.encode(), submitted.encode())
