"""One worker run in this process, as ``receipts worker`` (without ``--loop``) makes it.

The database tier's worker tests call :func:`work` with the settings of the
``worker_settings`` fixture (tests/db/conftest.py), against the fake Resend
of the ``fake`` fixture, whose API key is :data:`API_KEY`.
"""

from __future__ import annotations

import contextlib
import io
import signal
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from receipts.cli import main as receipts_command
from receipts.config import Settings
from receipts.delivery.configured import provider_from_settings
from receipts.delivery.summary import WorkerSummary
from receipts.delivery.worker import run_worker
from tests.helpers import root_logger_restored

API_KEY = "re_worker_test"


def work(settings: Settings, *, concurrency: int = 4, **options: Any) -> WorkerSummary:
    """Run the worker until nothing is ready (or ``options`` say otherwise); its summary."""
    provider = provider_from_settings(settings, concurrency=concurrency)
    try:
        return run_worker(settings, provider, concurrency=concurrency, **options)
    finally:
        provider.close()


def worker_command(environ: Mapping[str, str], *args: str) -> tuple[int, str, str]:
    """``receipts worker ARGS`` as its command line runs it, here in this process:
    its exit code, standard output and standard error.

    For the runs a test does not crash: the same code from the command line down,
    without a Python start-up per run. Runs that are killed, raced by another
    process or stopped by a signal use :func:`tests.real_processes.start_worker`.
    """
    out, err = io.StringIO(), io.StringIO()
    handlers = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            root_logger_restored(),
        ):
            code = receipts_command(["worker", *args], environ)
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    return code, out.getvalue(), err.getvalue()


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
