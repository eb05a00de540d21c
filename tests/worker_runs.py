"""One worker run in this process, as ``receipts worker`` (without ``--loop``) makes it.

The database tier's worker tests call :func:`work` with the settings of the
``worker_settings`` fixture (tests/db/conftest.py), against the fake Resend
of the ``fake`` fixture, whose API key is :data:`API_KEY`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
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


@contextmanager
def work_in_background(settings: Settings, **options: Any) -> Iterator[list[WorkerSummary]]:
    """:func:`work` on a thread of its own while the block runs; yields the list its
    summary is put in. The block's end waits for the run to end by itself; a
    block that fails stops the run first (its ``stop_event``)."""
    stop: threading.Event = options.setdefault("stop_event", threading.Event())
    result: list[WorkerSummary] = []
    runner = threading.Thread(
        target=lambda: result.append(work(settings, **options)), name="worker-run", daemon=True
    )
    runner.start()
    try:
        yield result
    except BaseException:
        stop.set()
        raise
    finally:
        runner.join(timeout=30)
    assert not runner.is_alive(), "the worker run did not end"
    assert result, "the worker run failed (see its traceback above)"


def patient(settings: Settings, *, lease_seconds: int = 60) -> Settings:
    """``settings`` with a read timeout no held request outlasts (30 s) and a lease
    to match: for tests that hold a request at the fake provider and release it
    when they choose, so the worker's own timeout never decides for them."""
    return replace(settings, provider_timeout=30.0, lease_seconds=lease_seconds)
