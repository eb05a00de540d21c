"""``receipts worker``: send ready receipts, then exit; ``--loop`` runs until SIGTERM.

As a platform cron job it drains every ready row (or stops claiming after
``--max-seconds``) and prints one summary line. With ``--loop`` it waits for
new rows (woken by NOTIFY, polling as a fallback) until SIGTERM or SIGINT,
then finishes or releases the rows it holds and exits 0.

Exit codes (``receipts.delivery.summary.ExitCode``; README, "Exit codes of
receipts worker"), each with one line on stderr saying why:

* 0: the run ended normally (rows the provider could not take now are retried later);
* 1: an unexpected failure (see the log);
* 2: configuration: a bad setting, or the provider refused ours (API key,
  ``RESEND_API_URL``, ``EMAIL_FROM``'s domain): rows pending, no attempt spent;
* 3: the database could not be reached;
* 4: sending is paused: a daily or monthly quota answer, now or in an earlier
  run, until the quota resets (``--resume`` lifts it after a plan upgrade);
* 5: the provider failed every send of the run (timeouts, 5xx, connection errors).

``--max-seconds`` is a hard bound: a run still going that long after it,
plus one send's timeouts and :data:`HARD_STOP_GRACE_SECONDS` (a database or
network that hangs without an error), exits 1 at once. Rows it held are
retried after their leases, as after a crash.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Mapping
from types import FrameType

from receipts.commands import database_settings
from receipts.db import Database
from receipts.delivery.configured import provider_from_settings
from receipts.delivery.providers.base import Provider
from receipts.delivery.sending_pause import clear_pause
from receipts.delivery.summary import ExitCode
from receipts.delivery.worker import DEFAULT_CONCURRENCY, DEFAULT_POLL_SECONDS, run_worker

# How long past --max-seconds and one send's timeouts a run may still take.
HARD_STOP_GRACE_SECONDS = 2.0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--loop", action="store_true", help="keep running until SIGTERM/SIGINT (woken by NOTIFY)"
    )
    parser.add_argument(
        "--concurrency",
        type=_positive_int,
        default=DEFAULT_CONCURRENCY,
        help=f"sends in flight at once (default {DEFAULT_CONCURRENCY})",
    )
    parser.add_argument(
        "--max-seconds",
        type=_positive_float,
        default=None,
        help="stop after this long: sends in progress finish, the rest wait (default: drain)",
    )
    parser.add_argument(
        "--poll-seconds",
        type=_positive_float,
        default=DEFAULT_POLL_SECONDS,
        help=f"with --loop, look for ready rows at least every N s ({DEFAULT_POLL_SECONDS:g})",
    )
    parser.add_argument(
        "--worker-id", default=None, help="name in the attempt log (default: host:pid)"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="lift a sending pause left by a quota answer (after upgrading the plan), then send",
    )


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    settings, database_url = database_settings(environ)
    provider = provider_from_settings(settings, concurrency=args.concurrency)
    if args.resume:
        _resume(database_url, provider)
    stop = threading.Event()
    _stop_on_signals(stop)
    if args.max_seconds is not None:
        send = settings.provider_connect_timeout + settings.provider_timeout
        _exit_after(args.max_seconds + send + HARD_STOP_GRACE_SECONDS)
    try:
        summary = run_worker(
            settings,
            provider,
            loop=args.loop,
            stop_event=stop,
            concurrency=args.concurrency,
            max_seconds=args.max_seconds,
            poll_seconds=args.poll_seconds,
            worker_id=args.worker_id,
        )
    finally:
        provider.close()
    print(f"receipts worker: {summary.line()}")
    code = summary.final_exit_code()
    if summary.error is not None:
        print(f"receipts worker: stopped: {summary.error}", file=sys.stderr)
    elif code == ExitCode.PROVIDER_FAILING:
        print(
            f"receipts worker: provider failing: every one of {summary.retried} send(s) failed "
            "(timeouts, 5xx or connection errors); rows are retried later",
            file=sys.stderr,
        )
    return code


def _exit_after(seconds: float) -> None:
    """Exit 1 once ``seconds`` have passed, whatever the run is waiting on."""

    def exit_now() -> None:
        print(
            f"receipts worker: stopped: still running {seconds:g} s after it started, past "
            "--max-seconds and one send's timeouts; rows it held are retried after their leases",
            file=sys.stderr,
            flush=True,
        )
        os._exit(ExitCode.UNEXPECTED)

    timer = threading.Timer(seconds, exit_now)
    timer.daemon = True
    timer.start()


def _resume(database_url: str, provider: Provider) -> None:
    """Lift the sending pause; say which one it was."""
    database = Database(database_url, max_size=1)
    try:
        with database.transaction() as conn:
            lifted = clear_pause(conn, provider.name)
    finally:
        database.close()
    if lifted is not None and lifted.seconds_left > 0:
        print(f"receipts worker: lifted: {lifted.line()}", file=sys.stderr)
    else:
        print("receipts worker: no sending pause was in force", file=sys.stderr)


def _stop_on_signals(stop: threading.Event) -> None:
    def handle(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value
