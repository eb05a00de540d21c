"""Fixtures of the fault lab: a cuttable database path, gunicorn, the fake provider."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fake_provider import FakeProviderClient, running_fake_provider
from tests.real_processes import PROVIDER_KEY, Gunicorn
from tests.tcp_proxy import TcpProxy, proxy_to


@pytest.fixture
def db_proxy(database_url: str) -> Iterator[TcpProxy]:
    """A proxy in front of this test's database; the test may cut it at any moment."""
    proxy = proxy_to(database_url)
    yield proxy
    proxy.close()


@pytest.fixture
def start_gunicorn() -> Iterator[type[Gunicorn]]:
    """Start ``Gunicorn(environ).start()`` instances; all are stopped after the test."""
    started: list[Gunicorn] = []

    class Tracked(Gunicorn):
        def start(self) -> Gunicorn:
            started.append(self)
            return super().start()

    yield Tracked
    for server in started:
        server.stop()


@pytest.fixture
def fake_provider() -> Iterator[FakeProviderClient]:
    """The fake Resend API: a real HTTP server on a free port (served from a thread)."""
    with running_fake_provider(api_key=PROVIDER_KEY) as provider:
        yield provider
