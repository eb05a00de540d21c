"""The support console as the tests drive it: users, a movable clock, logging in.

Passwords are hashed with argon2's smallest parameters so that a login costs
microseconds; the console checks any hash by the parameters written in it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from argon2 import PasswordHasher
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from receipts.config import load_settings
from receipts.web import create_app
from tests import stripe_events

PASSWORD = "a long test password"
SECRET = "console-secret-for-tests-" + "x" * 16
_CHEAP = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def cheap_hash(password: str = PASSWORD) -> str:
    return _CHEAP.hash(password)


def users_entry(*users: tuple[str, str], password: str = PASSWORD) -> str:
    return ";".join(f"{name}:{role}:{cheap_hash(password)}" for name, role in users)


def console_environ(environ: dict[str, str], **extra: str) -> dict[str, str]:
    """A web process's environment with an operator (olga) and a viewer (victor)."""
    return {
        **environ,
        "RECEIPTS_CONSOLE_USERS": users_entry(("olga", "operator"), ("victor", "viewer")),
        "RECEIPTS_CONSOLE_SECRET": SECRET,
        **extra,
    }


@dataclass
class Clock:
    """The console's clock, moved by hand."""

    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


@contextmanager
def console_app(environ: dict[str, str], clock: Clock | None = None) -> Iterator[Flask]:
    app = create_app(load_settings(environ))
    if clock is not None:
        app.extensions["receipts.console"].clock = clock
    try:
        yield app
    finally:
        app.extensions["receipts"].database.close()
        if "receipts.console" in app.extensions:
            app.extensions["receipts.console"].database.close()


def start_clock() -> Clock:
    return Clock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))


def csrf_of(page: TestResponse) -> str:
    found = _CSRF.search(page.get_data(as_text=True))
    assert found is not None, "the page has no form with a csrf_token"
    return found.group(1)


def log_in(
    client: FlaskClient,
    name: str,
    password: str = PASSWORD,
    *,
    address: str = "127.0.0.1",
    **headers: str,
) -> TestResponse:
    """Open the login form and submit it, from ``address`` (the socket's peer)."""
    peer = {"REMOTE_ADDR": address}
    token = csrf_of(client.get("/console/login", headers=headers, environ_overrides=peer))
    return client.post(
        "/console/login",
        data={"name": name, "password": password, "csrf_token": token},
        headers=headers,
        environ_overrides=peer,
    )


def post_form(client: FlaskClient, page_url: str, action: str, **fields: Any) -> TestResponse:
    """Submit a form of ``page_url`` as a browser would: with that page's csrf_token."""
    token = csrf_of(client.get(page_url))
    return client.post(action, data={"csrf_token": token, **fields})


def ingest(client: FlaskClient, invoice: dict[str, Any], event_id: str | None = None) -> str:
    """POST a signed invoice.paid for ``invoice`` to the app's webhook; its message key."""
    event = stripe_events.event(invoice, event_id=event_id)
    body = stripe_events.encode(event)
    answer = client.post(
        "/webhooks/stripe",
        data=body,
        headers={
            "Stripe-Signature": stripe_events.sign(body, stripe_events.TEST_SECRET),
            "Content-Type": "application/json",
        },
    )
    assert answer.status_code == 200, answer.get_data(as_text=True)
    key: str = answer.json["message_key"]  # type: ignore[index]
    return key
