"""What the console needs, built once per app: its users, its database, its clock.

The console shares the app and nothing else with the webhook routes: its own
connection pool (``RECEIPTS_CONSOLE_DATABASE_URL``, else ``DATABASE_URL``),
its own cookie, its own error pages. :func:`console` reaches it from a view.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from flask import Flask, current_app

from receipts import queries
from receipts.config import Settings
from receipts.console_users import ConsoleUser
from receipts.db import Connection, Database
from receipts.passwords import hash_like

_EXTENSION = "receipts.console"
_REPORTS = queries.load("reports")
# A password check holds ~19 MiB for ~25 ms; a flood of logins (however many
# addresses it comes from) waits here instead of exhausting the memory.
CONCURRENT_PASSWORD_CHECKS = 2
# Console pages read more than a webhook writes (a customer's whole history).
PAGE_STATEMENT_SECONDS = 10.0


def system_clock() -> datetime:
    return datetime.now(UTC)


class Console:
    """The console's settings, users, pool and clock (tests move the clock)."""

    def __init__(self, settings: Settings, clock: Callable[[], datetime] = system_clock) -> None:
        assert settings.console_secret is not None  # load_settings requires it with users
        url = settings.console_database_url or settings.database_url
        assert url is not None
        self.settings = settings
        self.secret = settings.console_secret
        self.users = {user.name: user for user in settings.console_users}
        self.clock = clock
        self.database = Database(
            url,
            max_size=4,
            timeout=settings.database_timeout,
            work_timeout=PAGE_STATEMENT_SECONDS,
            prepared_statements=settings.prepared_statements,
        )
        self.password_checks = threading.BoundedSemaphore(CONCURRENT_PASSWORD_CHECKS)
        self._stand_in_hash: str | None = None

    def user(self, name: str | None) -> ConsoleUser | None:
        return self.users.get(name) if name else None

    @property
    def stand_in_hash(self) -> str:
        """A hash nobody knows the password of, checked for unknown names so that they
        take as long as a known one (made with the first user's parameters)."""
        if self._stand_in_hash is None:
            model = next(iter(self.users.values())).password_hash
            self._stand_in_hash = hash_like(model, secrets.token_urlsafe(32))
        return self._stand_in_hash

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """One consistent, read-only view of the database for one page."""
        with self.database.transaction() as conn:
            conn.execute(_REPORTS["read_only_snapshot"])
            conn.execute(_REPORTS["no_jit"])
            yield conn

    @contextmanager
    def writing(self) -> Iterator[Connection]:
        """One transaction that commits when the block ends without an error."""
        with self.database.transaction() as conn:
            yield conn


def init_app(app: Flask, settings: Settings) -> Console:
    built = Console(settings)
    app.extensions[_EXTENSION] = built
    return built


def console() -> Console:
    found = current_app.extensions[_EXTENSION]
    assert isinstance(found, Console)
    return found
