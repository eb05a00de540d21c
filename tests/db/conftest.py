"""The worker's fixtures for the database tier: the fake Resend and the settings of a run.

:func:`tests.worker_runs.work` runs the worker with them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from receipts.config import Settings, load_settings
from tests.fake_provider import FakeProviderClient, running_fake_provider
from tests.worker_runs import API_KEY


@pytest.fixture
def fake() -> Iterator[FakeProviderClient]:
    """The fake Resend API: a real HTTP server on a free port, served from a thread."""
    with running_fake_provider(api_key=API_KEY) as client:
        yield client


@pytest.fixture
def worker_settings(
    database_url: str, fake: FakeProviderClient, pooling: dict[str, str]
) -> Settings:
    """A worker sending to ``fake``, with short timeouts and a 5 s lease so that failure
    cases finish within a second, and no send-rate cap (pacing has tests of its own)."""
    settings = load_settings(
        {
            **pooling,
            "DATABASE_URL": database_url,
            "RESEND_API_KEY": API_KEY,
            "RESEND_API_URL": fake.url,
            "EMAIL_FROM": "Billing <billing@example.com>",
            "RECEIPTS_PROVIDER_TIMEOUT": "0.5",
            "RECEIPTS_PROVIDER_CONNECT_TIMEOUT": "0.5",
            "RECEIPTS_SEND_RATE": "0",
        }
    )
    return replace(settings, lease_seconds=5)
