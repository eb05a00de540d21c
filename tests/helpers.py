"""Small helpers for tests that start processes, servers and wait for them."""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

# The temp directory of the test run itself, read before any test's own replaces
# it (tests/conftest.py, ``_own_folders``): where the servers every test shares
# (the embedded PostgreSQL, PgBouncer) keep their files.
RUN_TEMP_DIR = Path(tempfile.gettempdir())

# How many examples the property tests draw, as a multiple of the default run's:
# .ci/run draws four times as many (RECEIPTS_PROPERTY_SCALE=4).
PROPERTY_SCALE = float(os.environ.get("RECEIPTS_PROPERTY_SCALE", "1"))


def examples(default_run: int) -> int:
    """Examples for a property test: ``default_run`` in the default run, scaled."""
    return max(1, round(default_run * PROPERTY_SCALE))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def is_running(pid: int) -> bool:
    """A live process; a zombie waiting to be reaped counts as gone."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


class ManualClock:
    """A monotonic clock that moves only when the test moves it (``advance``).

    Pass it where the code takes a ``clock`` (``Deadlines``, ``RateLimiter``,
    ``run_worker``): what is due by that clock then happens when the test says,
    not when a loaded machine gets round to it.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


def wait_for(
    condition: Callable[[], object], timeout: float = 60.0, what: str = "the condition"
) -> None:
    """Poll ``condition`` until it is true; fail the test after ``timeout`` seconds.

    The timeout only bounds a failing test: a loaded machine can take many
    seconds to start a process, and a test that passes never waits for it.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)


@contextmanager
def root_logger_restored() -> Iterator[None]:
    """Give the root logger back its handlers and level afterwards.

    Commands (and the web app's JSON logging) configure the root logger for the
    whole process; a test that runs one must not leave it configured for the next.
    """
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:], root.level = handlers, level


# /metrics needs a token unless it is scraped on its own port; the test
# environment sets this one (tests/conftest.py, ``environ``).
METRICS_TOKEN = "metrics-token-for-tests"
METRICS_AUTH = {"Authorization": f"Bearer {METRICS_TOKEN}"}
