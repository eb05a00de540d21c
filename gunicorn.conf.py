"""gunicorn settings for the web process: ``gunicorn wsgi:app`` reads this file.

Each gunicorn worker is a process with its own counters. ``/metrics`` merges
them through ``prometheus_client``'s multiprocess mode, which needs
``PROMETHEUS_MULTIPROC_DIR`` set before any worker imports the library: this
file sets it (a temporary directory removed on exit, unless the platform gives
one), empties it when the server starts, and marks each dead worker so its
gauges stop counting. Command-line options (``--bind``, ``--workers``) still
override the values below.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

_OWN_METRICS_DIR = not os.environ.get("PROMETHEUS_MULTIPROC_DIR")
if _OWN_METRICS_DIR:
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="receipts-metrics-")

bind = f"0.0.0.0:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
threads = int(os.environ.get("GUNICORN_THREADS", "4"))


def on_starting(server: Any) -> None:
    """Counters of an earlier run must not be merged into this one."""
    directory = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()


def child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def on_exit(server: Any) -> None:
    if _OWN_METRICS_DIR:
        shutil.rmtree(os.environ["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)
