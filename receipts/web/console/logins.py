"""``/console/login`` and ``/console/logout``.

A login is checked against ``RECEIPTS_CONSOLE_USERS`` only while the throttle
allows it (:mod:`receipts.web.console.throttle`); an unknown name costs the
same password check as a known one, so the answer's timing does not tell
which names exist. Success gives a new session (and CSRF token) and goes on
to the page asked for, if it is a console page.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from flask import g, redirect, render_template, request
from werkzeug.wrappers import Response as WerkzeugResponse

from receipts.logs import log_fields
from receipts.passwords import password_matches
from receipts.web.console import throttle
from receipts.web.console.blueprint import blueprint
from receipts.web.console.context import Console, console

log = logging.getLogger("receipts.web.console")

Page = str | tuple[str, int] | tuple[str, int, dict[str, str]] | WerkzeugResponse


@blueprint.get("/login")
def login() -> Page:
    if g.console_user is not None:
        return redirect(_next_page(request.args.get("next")), code=303)
    return render_template("console/login.html", next=_next_page(request.args.get("next")))


@blueprint.post("/login")
def login_submitted() -> Page:
    here = console()
    typed_name = request.form.get("name", "").strip()
    password = request.form.get("password", "")
    next_page = _next_page(request.form.get("next"))
    attempt = throttle.attempt_of(request, typed_name, here.settings.console_proxy_hops)
    now = here.clock()
    with here.writing() as conn:
        blocked = throttle.seconds_blocked(conn, attempt, now)
    if blocked is not None:
        log_fields(log, "console login throttled", logging.WARNING, user=attempt.user_name)
        minutes = max(1, round(blocked / 60))
        page = render_template(
            "console/login.html",
            next=next_page,
            name=typed_name,
            problem=f"Too many failed logins. Try again in about {minutes} minute(s).",
        )
        return page, 429, {"Retry-After": str(blocked)}
    user = here.user(typed_name)
    if not _password_is_right(here, user.password_hash if user else None, password):
        with here.writing() as conn:
            throttle.record_failure(conn, attempt, now)
        log_fields(log, "console login failed", logging.WARNING, user=attempt.user_name)
        page = render_template(
            "console/login.html",
            next=next_page,
            name=typed_name,
            problem="That name and password do not match a console user.",
        )
        return page, 401
    assert user is not None
    g.console_new_session = g.console_session.logged_in(user, here, now)
    log_fields(log, "console login", user=user.name, role=user.role)
    return redirect(next_page, code=303)


def _password_is_right(here: Console, password_hash: str | None, password: str) -> bool:
    with here.password_checks:
        matches = password_matches(password_hash or here.stand_in_hash, password)
    return matches and password_hash is not None


@blueprint.post("/logout")
def logout() -> WerkzeugResponse:
    log_fields(log, "console logout", user=g.console_user.name)
    g.console_forget = True
    return redirect("/console/login", code=303)


def _next_page(asked: str | None) -> str:
    """Where to go after logging in: a console page of this site, else the search page."""
    if not asked:
        return "/console/"
    parts = urlsplit(asked)
    if parts.scheme or parts.netloc or not parts.path.startswith("/console/"):
        return "/console/"
    if "\\" in asked or parts.path.startswith("/console/login"):
        return "/console/"
    return asked
