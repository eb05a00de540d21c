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

import atexit
import gc
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

_OWN_METRICS_DIR = not os.environ.get("PROMETHEUS_MULTIPROC_DIR")
if _OWN_METRICS_DIR:
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="receipts-metrics-")
    _ARBITER_PID = os.getpid()

    def _remove_own_metrics_dir() -> None:
        # At the arbiter's exit, also when the app never loads (a bad setting
        # stops it before any hook); never in the workers it forked.
        if os.getpid() == _ARBITER_PID:
            shutil.rmtree(os.environ["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)

    atexit.register(_remove_own_metrics_dir)

bind = f"0.0.0.0:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
# Reading a request body holds a thread until the body is in (at most
# RECEIPTS_BODY_TIMEOUT, 5 s, then 408), and each worker hands every accepted
# connection to its own threads, however busy they are. Measured with 40
# clients that send headers and one byte of body, 2 workers: with 4 threads
# every signed delivery timed out; with 16 one waited 8.8 s; with 32 one waited
# 4.6 s (one worker had accepted more slow clients than it had threads); with
# 64 every delivery was answered within 0.1 s. Idle threads cost no CPU, and
# the pool holds at most RECEIPTS_POOL_MAX_SIZE database connections whatever
# the thread count. tests/processes/faults/test_hostile_clients.py keeps this.
threads = int(os.environ.get("GUNICORN_THREADS", "64"))
# The app is built once, in the arbiter, and the workers are forked from it:
# they share its pages (imports, compiled templates) until one writes to them.
# Nothing in create_app connects or starts a thread (receipts/db.py,
# receipts/deadlines.py, receipts/ingest/wakeup.py start theirs in the child).
# A bad setting then stops the arbiter itself, before any worker is forked.
# Code changes need a restart, not a HUP.
preload_app = True
# Recent gunicorn (27 here) listens on a control socket that can reload,
# reconfigure or stop the server; the web process needs none (older versions
# ignore the name).
control_socket_disable = True

# Every answer carries a Server header; gunicorn's names itself and its
# version, which tells a scanner what to try. Say only what answers.
import gunicorn.http.wsgi as _gunicorn_wsgi  # noqa: E402

_gunicorn_wsgi.SERVER = "receipts"


def on_starting(server: Any) -> None:
    """Counters of an earlier run must not be merged into this one; and with
    RECEIPTS_METRICS_PORT, listen on that private port too, next to whatever
    ``bind`` (or ``--bind``) says: /metrics answers there without a token."""
    directory = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()
    from receipts.config import ConfigError, metrics_address

    try:
        private = metrics_address(os.environ)
    except ConfigError as error:
        raise SystemExit(f"receipts: configuration error: {error}") from None
    if private is not None:
        host, port = private
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        server.cfg.set("bind", [*server.cfg.bind, address])


def pre_fork(server: Any, worker: Any) -> None:
    """Keep the collector off the app's objects: a collection writes to every
    object it visits, which would copy each shared page into each worker."""
    gc.freeze()


def child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
