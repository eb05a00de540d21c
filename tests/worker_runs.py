"""One worker run in this process, as ``receipts worker`` (without ``--loop``) makes it.

The database tier's worker tests call :func:`work` with the settings of the
``worker_settings`` fixture (tests/db/conftest.py), against the fake Resend
of the ``fake`` fixture, whose API key is :data:`API_KEY`.
"""

from __future__ import annotations

from typing import Any

from receipts.config import Settings
from receipts.delivery.configured import provider_from_settings
from receipts.delivery.summary import WorkerSummary
from receipts.delivery.worker import run_worker

API_KEY = "re_worker_test"


def work(settings: Settings, *, concurrency: int = 4, **options: Any) -> WorkerSummary:
    """Run the worker until nothing is ready (or ``options`` say otherwise); its summary."""
    provider = provider_from_settings(settings, concurrency=concurrency)
    try:
        return run_worker(settings, provider, concurrency=concurrency, **options)
    finally:
        provider.close()
