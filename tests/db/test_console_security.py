"""The support console's doors: off by default, login, the cookie, CSRF, throttling, headers.

Each test runs the real app against its own database, through Flask's test
client; the console's clock is moved by hand (tests/console_client.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from http.cookies import SimpleCookie

import psycopg
import pytest
from flask.testing import FlaskClient

from receipts.web.console.throttle import MAX_FAILURES, WINDOW
from tests.console_client import (
    PASSWORD,
    Clock,
    console_app,
    console_environ,
    csrf_of,
    log_in,
    start_clock,
    users_entry,
)


@pytest.fixture
def clock() -> Clock:
    return start_clock()


@pytest.fixture
def web(environ: dict[str, str], clock: Clock) -> Iterator[FlaskClient]:
    with console_app(console_environ(environ), clock) as app:
        yield app.test_client()


def _cookie(response: object) -> SimpleCookie:
    jar: SimpleCookie = SimpleCookie()
    for header in response.headers.getlist("Set-Cookie"):  # type: ignore[attr-defined]
        jar.load(header)
    return jar


def test_without_console_users_every_console_url_is_not_found(client: FlaskClient) -> None:
    """RECEIPTS_CONSOLE_USERS unset: /console/ and its login page answer 404, like any
    unknown URL, and the webhook routes are as they were."""
    for path in ("/console/", "/console/login", "/console/review", "/console/static/console.css"):
        assert client.get(path).status_code == 404
    assert client.post("/console/login", data={"name": "olga"}).status_code == 404
    assert client.get("/healthz").status_code == 200


def test_without_a_session_a_page_sends_the_browser_to_the_login_form(web: FlaskClient) -> None:
    """303 to /console/login, remembering the page asked for."""
    answer = web.get("/console/review?reason=attempts_exhausted")
    assert answer.status_code == 303
    assert answer.headers["Location"] == (
        "/console/login?next=/console/review%3Freason%3Dattempts_exhausted"
    )
    assert web.get("/console/").headers["Location"] == "/console/login?next=/console/"


def test_a_login_goes_to_the_page_asked_for_and_never_off_the_console(web: FlaskClient) -> None:
    token = csrf_of(web.get("/console/login"))
    fields = {"name": "olga", "password": PASSWORD, "csrf_token": token}
    answer = web.post("/console/login", data={**fields, "next": "/console/status"})
    assert (answer.status_code, answer.headers["Location"]) == (303, "/console/status")
    for elsewhere in (
        "https://evil.example/console/",
        "//evil.example/console/",
        "/healthz",
        "/console/\\\\evil.example",
    ):
        web.post("/console/logout", data={"csrf_token": csrf_of(web.get("/console/"))})
        token = csrf_of(web.get("/console/login"))
        answer = web.post("/console/login", data={**fields, "csrf_token": token, "next": elsewhere})
        assert answer.headers["Location"] == "/console/", elsewhere


def test_the_session_cookie_is_httponly_strict_expiring_and_secure_off_localhost(
    environ: dict[str, str], clock: Clock
) -> None:
    """Secure on any host but plain-HTTP localhost; HttpOnly, SameSite=Strict, Max-Age the
    session's lifetime, Path /console."""
    with console_app(console_environ(environ, RECEIPTS_CONSOLE_SESSION_HOURS="2"), clock) as app:
        public = app.test_client()
        headers = {"Host": "receipts.example.com"}
        answer = log_in(public, "olga", **headers)
        assert answer.status_code == 303
        morsel = _cookie(answer)["receipts_console"]
        assert morsel["secure"] and morsel["httponly"]
        assert morsel["samesite"] == "Strict"
        assert morsel["path"] == "/console"
        assert morsel["max-age"] == str(2 * 3600)

        local = log_in(app.test_client(), "olga")  # http://localhost
        assert not _cookie(local)["receipts_console"]["secure"]
        assert _cookie(local)["receipts_console"]["httponly"]


def test_a_session_expires_after_its_hours(web: FlaskClient, clock: Clock) -> None:
    assert log_in(web, "olga").status_code == 303
    assert web.get("/console/").status_code == 200
    clock.advance(timedelta(hours=8) - timedelta(seconds=1))
    assert web.get("/console/").status_code == 200
    clock.advance(timedelta(seconds=1))
    assert web.get("/console/").status_code == 303


def test_a_forged_or_foreign_cookie_is_no_session(
    web: FlaskClient, environ: dict[str, str], clock: Clock
) -> None:
    """A cookie signed with another secret, or edited, logs nobody in."""
    other = console_environ(environ, RECEIPTS_CONSOLE_SECRET="another-secret-" + "y" * 24)
    with console_app(other, clock) as app:
        stranger = app.test_client()
        log_in(stranger, "olga")
        value = _cookie(stranger.get("/console/"))  # no new cookie on a plain page
        stolen = stranger.get_cookie("receipts_console", path="/console")
        assert stolen is not None and not value
    web.set_cookie("receipts_console", stolen.value, path="/console")
    assert web.get("/console/").status_code == 303
    log_in(web, "olga")
    genuine = web.get_cookie("receipts_console", path="/console")
    assert genuine is not None
    web.set_cookie("receipts_console", genuine.value[:-2] + "xx", path="/console")
    assert web.get("/console/").status_code == 303


def test_a_new_password_or_a_removed_user_ends_the_session(
    environ: dict[str, str], clock: Clock
) -> None:
    with console_app(console_environ(environ), clock) as app:
        browser = app.test_client()
        log_in(browser, "olga")
        cookie = browser.get_cookie("receipts_console", path="/console")
        assert cookie is not None
    changed = console_environ(
        environ, RECEIPTS_CONSOLE_USERS=users_entry(("olga", "operator"), password="new " * 4)
    )
    removed = console_environ(environ, RECEIPTS_CONSOLE_USERS=users_entry(("victor", "viewer")))
    for later in (changed, removed):
        with console_app(later, clock) as app:
            browser = app.test_client()
            browser.set_cookie("receipts_console", cookie.value, path="/console")
            assert browser.get("/console/").status_code == 303


def test_a_wrong_password_is_refused_and_an_unknown_name_alike(web: FlaskClient) -> None:
    """401 with the form again; the same words whether the name exists or not."""
    wrong = log_in(web, "olga", "not the password")
    unknown = log_in(web, "nobody", "not the password")
    assert wrong.status_code == unknown.status_code == 401
    words = "That name and password do not match a console user."
    assert words in wrong.get_data(as_text=True) and words in unknown.get_data(as_text=True)
    assert web.get("/console/").status_code == 303


def test_a_form_without_its_csrf_token_is_refused_and_changes_nothing(
    web: FlaskClient, db: psycopg.Connection[dict[str, object]]
) -> None:
    """A login or logout without the session's csrf_token, or with another one: 403."""
    web.get("/console/login")
    refused = web.post("/console/login", data={"name": "olga", "password": PASSWORD})
    assert refused.status_code == 403
    wrong = {"name": "olga", "password": PASSWORD, "csrf_token": "guessed"}
    assert web.post("/console/login", data=wrong).status_code == 403
    assert web.get("/console/").status_code == 303  # not logged in
    log_in(web, "olga")
    assert web.post("/console/logout").status_code == 403
    assert web.post("/console/logout", data={"csrf_token": "guessed"}).status_code == 403
    assert web.get("/console/").status_code == 200  # still logged in
    # A refused login is no failed login: it never reached the password.
    assert db.execute("SELECT count(*) AS n FROM console_login_failures").fetchone() == {"n": 0}


def test_logout_ends_the_session(web: FlaskClient) -> None:
    log_in(web, "olga")
    answer = web.post("/console/logout", data={"csrf_token": csrf_of(web.get("/console/"))})
    assert (answer.status_code, answer.headers["Location"]) == (303, "/console/login")
    assert web.get("/console/").status_code == 303


def test_ten_failed_logins_for_one_user_block_the_next_until_the_window_passes(
    web: FlaskClient, clock: Clock
) -> None:
    """The 11th login for olga within 15 minutes gets 429 with Retry-After, even with
    the right password and from an address of its own; a failure leaving the window
    lets her in again. Each failure comes from another address."""
    for n in range(MAX_FAILURES):
        wrong = log_in(web, "olga", "wrong password", address=f"192.0.2.{n}")
        assert wrong.status_code == 401
        clock.advance(timedelta(seconds=30))
    blocked = log_in(web, "olga", address="198.51.100.1")
    assert blocked.status_code == 429
    # The first failure was 5 minutes ago: it leaves the window in 10 minutes.
    left = WINDOW - timedelta(minutes=5)
    assert blocked.headers["Retry-After"] == str(int(left.total_seconds()))
    assert "Too many failed logins" in blocked.get_data(as_text=True)
    assert web.get("/console/").status_code == 303
    assert log_in(web, "victor", address="192.0.2.1").status_code == 303  # not blocked
    web.post("/console/logout", data={"csrf_token": csrf_of(web.get("/console/"))})
    clock.advance(WINDOW - timedelta(minutes=5))
    assert log_in(web, "olga", address="198.51.100.1").status_code == 303


def test_ten_failed_logins_from_one_address_block_it_for_every_name(
    environ: dict[str, str], clock: Clock
) -> None:
    """Behind one proxy (RECEIPTS_CONSOLE_PROXY_HOPS=1) the address is the one the proxy
    appended to X-Forwarded-For: ten failures from it, under ten names, block it; another
    address still logs in."""
    with console_app(console_environ(environ, RECEIPTS_CONSOLE_PROXY_HOPS="1"), clock) as app:
        web = app.test_client()
        attacker = {"X-Forwarded-For": "10.9.9.9, 203.0.113.7"}  # the client forged the first
        for n in range(MAX_FAILURES):
            assert log_in(web, f"guess{n}", "wrong password", **attacker).status_code == 401
        assert log_in(web, "olga", **attacker).status_code == 429
        elsewhere = {"X-Forwarded-For": "10.9.9.9, 198.51.100.2"}
        assert log_in(app.test_client(), "olga", **elsewhere).status_code == 303


def test_failed_logins_count_in_every_web_process(environ: dict[str, str], clock: Clock) -> None:
    """gunicorn runs several processes, each its own app: failures made through one
    count in another, since they are counted in the database."""
    settings = console_environ(environ)
    with console_app(settings, clock) as first, console_app(settings, clock) as second:
        for n in range(MAX_FAILURES):
            app = first if n % 2 else second
            wrong = log_in(app.test_client(), "olga", "wrong", address=f"192.0.2.{n}")
            assert wrong.status_code == 401
        assert log_in(first.test_client(), "olga").status_code == 429
        assert log_in(second.test_client(), "olga").status_code == 429


def test_old_failures_are_deleted_as_new_ones_come(
    web: FlaskClient, clock: Clock, db: psycopg.Connection[dict[str, object]]
) -> None:
    log_in(web, "olga", "wrong")
    clock.advance(WINDOW)
    log_in(web, "victor", "wrong")
    found = db.execute("SELECT user_name FROM console_login_failures").fetchall()
    assert found == [{"user_name": "victor"}]


def test_console_pages_carry_the_security_headers(web: FlaskClient) -> None:
    """No inline script or style allowed, no framing, nothing cached, no referrer; and
    the pages themselves use no script and no style attribute."""
    pages = [web.get("/console/login")]
    log_in(web, "olga")
    pages += [web.get(path) for path in ("/console/", "/console/review", "/console/status")]
    pages.append(web.get("/console/receipt/platform/test/in_1Nothing/invoice-paid"))
    for page in pages:
        policy = page.headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy
        assert "unsafe-inline" not in policy and "script-src" not in policy
        assert page.headers["Cache-Control"] == "no-store"
        assert page.headers["X-Frame-Options"] == "DENY"
        assert page.headers["X-Content-Type-Options"] == "nosniff"
        html = page.get_data(as_text=True)
        assert "<script" not in html and " style=" not in html
    assert pages[-1].status_code == 404


def test_the_webhook_routes_carry_no_console_headers_or_cookie(web: FlaskClient) -> None:
    answer = web.get("/healthz")
    assert "Content-Security-Policy" not in answer.headers
    assert "Set-Cookie" not in answer.headers
