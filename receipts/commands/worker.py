"""``receipts worker``: send ready receipts, then exit; ``--loop`` runs until SIGTERM.

As a platform cron job it drains every ready row (or stops claiming after
``--max-seconds``) and prints one summary line. With ``--loop`` it waits for
new rows (woken by NOTIFY, polling as a fallback) until SIGTERM or SIGINT,
then finishes or releases the rows it holds and exits 0. A provider that
refuses our credentials (401/403) stops the run with exit code 2.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Mapping
from types import FrameType

from receipts.commands import database_settings
from receipts.delivery.worker import (
    DEFAULT_CONCURRENCY,
    DEFAULT_POLL_SECONDS,
    provider_from_settings,
    run_worker,
)


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


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    settings, _database_url = database_settings(environ)
    provider = provider_from_settings(settings, concurrency=args.concurrency)
    stop = threading.Event()
    _stop_on_signals(stop)
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
    if summary.error is not None:
        print(f"receipts worker: stopped: {summary.error}", file=sys.stderr)
        return summary.exit_code or 1
    return 0


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
