"""The console's blueprint: who may see a page, what every answer carries.

Before any view: the session is read; a page other than the login form
without a logged-in user answers 303 to ``/console/login``; a POST whose
``csrf_token`` does not match the session's is refused with 403 before the
view runs. After every view: the security headers below (no inline script
or style, no framing, no caching, no referrer) and the session cookie.
Errors are HTML pages of the console, never a traceback.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

import psycopg
from flask import Blueprint, Response, abort, g, redirect, render_template, request
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response as WerkzeugResponse

from receipts.console_users import ConsoleUser
from receipts.db import DatabaseUnavailable, describe_error
from receipts.formatting import duration, utc
from receipts.logs import log_fields
from receipts.web.console import presenting, sessions
from receipts.web.console.context import console

log = logging.getLogger("receipts.web.console")

blueprint = Blueprint(
    "console",
    __name__,
    url_prefix="/console",
    template_folder="templates",
    static_folder="static",
)

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}
_STALE_FORM = (
    "This form has expired or did not come from the console. Go back, reload the page and "
    "try again; nothing was changed."
)
# Pages a visitor without a session may open.
_OPEN_ENDPOINTS = {"console.login", "console.login_submitted", "console.static"}


def signed_in_user() -> ConsoleUser:
    """The user of this request (every view but the login form has one)."""
    user: ConsoleUser | None = g.get("console_user")
    assert user is not None
    return user


@blueprint.before_request
def _authenticate() -> WerkzeugResponse | None:
    here = console()
    g.console_session = sessions.load(here, request)
    g.console_user = sessions.current_user(here, g.console_session)
    if request.method == "POST" and not sessions.csrf_matches(
        g.console_session, request.form.get(sessions.CSRF_FIELD)
    ):
        log_fields(log, "console form refused: missing or wrong csrf_token", path=request.path)
        abort(403, _STALE_FORM)
    if g.console_user is None and request.endpoint not in _OPEN_ENDPOINTS:
        target = request.full_path if request.method == "GET" else "/console/"
        return redirect(f"/console/login?next={quote(target.rstrip('?'))}", code=303)
    return None


@blueprint.after_request
def _secure(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    here = console()
    if g.get("console_forget"):
        sessions.forget(request, response)
    elif g.get("console_new_session") is not None:
        sessions.store(here, g.console_new_session, request, response)
    return response


@blueprint.context_processor
def _helpers() -> dict[str, Any]:
    """What every console template may call."""
    return {
        "csrf_token": csrf_token,
        "current_user": g.get("console_user"),
        "when": utc,
        "duration": duration,
        "amount": presenting.amount,
        "email_label": presenting.email_label,
        "state_label": presenting.state_label,
        "reason_text": presenting.review_reason_text,
        "reason_summary": presenting.reason_summary,
    }


def csrf_token() -> str:
    """The token a form of this page carries; a session is made for it if needed."""
    session: sessions.Session | None = g.get("console_session")
    if session is None:
        session = sessions.Session.fresh(console().clock())
        g.console_session = session
        g.console_new_session = session
    return session.csrf_token


@blueprint.errorhandler(HTTPException)
def _http_error(error: HTTPException) -> tuple[str, int, dict[str, str]]:
    code = error.code or 500
    headers: dict[str, str] = {}
    if error.response is not None:
        headers.update(error.response.headers)
    return _error_page(code, error.name, error.description or ""), code, headers


@blueprint.errorhandler(DatabaseUnavailable)
def _database_unavailable(error: DatabaseUnavailable) -> tuple[str, int]:
    log_fields(log, "console: database unavailable", logging.WARNING, reason=error.reason)
    message = "The database cannot be reached just now. Try again in a minute."
    return _error_page(503, "Database unavailable", message), 503


@blueprint.errorhandler(psycopg.errors.InsufficientPrivilege)
def _denied(error: psycopg.Error) -> tuple[str, int]:
    log_fields(log, "console: privilege missing", logging.ERROR, error=describe_error(error))
    message = (
        "The console's database role may not do this. It connects with "
        "RECEIPTS_CONSOLE_DATABASE_URL (else DATABASE_URL), which must be a login role in "
        "<prefix>_operator (README, Least privilege)."
    )
    return _error_page(503, "Not allowed by the database", message), 503


def _error_page(code: int, title: str, message: str) -> str:
    context: dict[str, Any] = {"code": code, "title": title, "message": message}
    return render_template("console/error.html", **context)
