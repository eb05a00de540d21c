"""A month-end burst at the provider's team limit: batches, beside single sends.

Run by hand (not part of the tests), or as part of ``python -m bench``::

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python -m bench.burst [--rows 100000] [--workers 2] [--batch-size 100] \\
        [--team-rate 5] [--app-rate 1] [--send-share 0.6] [--single-minutes 2]

It makes a throwaway database, writes ``--rows`` ready receipts straight into
it (as the webhook stores them: the worker renders each at its first claim),
and starts the fake Resend as a process of its own enforcing ``--team-rate``
requests per second for the whole team (a sliding window, answering with
Resend's ``ratelimit-*`` headers and 429 ``rate_limit_exceeded`` over it). A
thread stands in for the app sending its own mail (password resets, sign-in
links) through the same team limit at ``--app-rate`` requests per second.
``--workers`` ``receipts worker`` processes drain the rows together with
``RECEIPTS_BATCH_SIZE=--batch-size`` and the default pace (the fleet's share,
``RECEIPTS_SEND_SHARE``), each run again until no receipt is left or
``--max-minutes`` pass (a drain run ends early when the provider asks it to
wait; cron would start the next).

Then the same, sending singly, for ``--single-minutes`` only (single sends of
100,000 receipts take hours at 3 requests/s): how many went out, and how long
all of them would take at that pace.

It prints, for each: the time to drain, the provider requests receipts used,
the 429s receipts saw and the 429s the app saw, the receipts sent, and
doubles: receipts the provider delivered more than once (counted by each
email's ``message_key`` tag), which must be 0.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import requests

from bench.common import fake_provider_process, machine, server_url_or_exit, throwaway_database
from bench.drain import fill
from tests.fake_provider import FakeProviderClient

ROOT = Path(__file__).resolve().parent.parent
API_KEY = "re_bench_burst"
APP_KEY_PREFIX = "app/"
APP_SUBJECT = "Sign in"


@dataclass(frozen=True)
class Burst:
    batch_size: int
    rows: int
    seconds: float
    sent: int
    receipt_requests: int
    receipt_429s: int
    app_requests: int
    app_429s: int
    doubles: int

    @property
    def unsent(self) -> int:
        return self.rows - self.sent

    def line(self) -> str:
        return (
            f"batch size {self.batch_size}: {self.sent}/{self.rows} sent in "
            f"{self.seconds:.1f} s, {self.receipt_requests} requests, "
            f"{self.receipt_429s} 429s for receipts; the app: {self.app_requests} requests, "
            f"{self.app_429s} 429s; doubles {self.doubles}"
        )

    def projected_hours(self) -> float:
        """How long all the rows would take at the pace of this (bounded) run."""
        return self.rows * self.seconds / max(1, self.sent) / 3600


@dataclass(frozen=True)
class BurstFigures:
    batched: Burst
    single: Burst | None  # bounded to --single-minutes; None when not run


def parser() -> argparse.ArgumentParser:
    parsed = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parsed.add_argument("--rows", type=int, default=100_000)
    parsed.add_argument("--workers", type=int, default=2, help="worker processes at once")
    parsed.add_argument("--batch-size", type=int, default=100)
    parsed.add_argument("--team-rate", type=int, default=5, help="the team's requests/s")
    parsed.add_argument("--app-rate", type=float, default=1.0, help="the app's own requests/s")
    parsed.add_argument("--send-share", type=float, default=0.6, help="RECEIPTS_SEND_SHARE")
    parsed.add_argument("--max-minutes", type=float, default=15.0)
    parsed.add_argument(
        "--single-minutes", type=float, default=2.0, help="how long to send singly (0: not)"
    )
    return parsed


def main(argv: list[str] | None = None) -> int:
    figures = measure(parser().parse_args(argv))
    print(figures.batched.line())
    if figures.single is not None:
        print(figures.single.line())
    return 0


def measure(args: argparse.Namespace) -> BurstFigures:
    server_url = server_url_or_exit()
    print(f"machine: {machine()}")
    print(
        f"rows={args.rows} workers={args.workers} team rate={args.team_rate}/s "
        f"app rate={args.app_rate}/s RECEIPTS_SEND_SHARE={args.send_share}",
        flush=True,
    )
    batched = burst(server_url, args, args.batch_size, args.max_minutes * 60)
    print(batched.line(), flush=True)
    single = None
    if args.single_minutes > 0:
        single = burst(server_url, args, 1, args.single_minutes * 60)
        print(
            f"{single.line()}; all {single.rows} at this pace: {single.projected_hours():.1f} h",
            flush=True,
        )
    return BurstFigures(batched=batched, single=single)


def burst(server_url: str, args: argparse.Namespace, batch_size: int, limit: float) -> Burst:
    """One drain of ``args.rows`` fresh receipts at the team limit, with the app sending,
    for at most ``limit`` seconds."""
    with (
        throwaway_database(server_url, "receipts_bench_burst") as url,
        fake_provider_process(API_KEY, rate_limit=args.team_rate) as provider,
    ):
        fill(url, args.rows, as_the_webhook_stores_them=True)
        env = {
            "PATH": os.environ.get("PATH", ""),
            "DATABASE_URL": url,
            "RESEND_API_KEY": API_KEY,
            "RESEND_API_URL": provider.url,
            "EMAIL_FROM": "Billing <billing@example.com>",
            "RECEIPTS_SEND_SHARE": str(args.send_share),
            "RECEIPTS_BATCH_SIZE": str(batch_size),
            "LOG_FORMAT": "json",
        }
        with app_mail(provider.url, args.app_rate) as app:
            seconds = drain(url, env, limit, args.workers)
        return _report(url, provider, batch_size, args.rows, seconds, app)


def drain(url: str, env: dict[str, str], limit: float, workers: int) -> float:
    """``workers`` threads each running ``receipts worker`` again until no receipt is
    waiting or ``limit`` seconds pass."""
    started = time.monotonic()

    def keep_draining() -> None:
        while (left := limit - (time.monotonic() - started)) > 1 and _waiting(url) > 0:
            subprocess.run(
                [sys.executable, "-m", "receipts.cli", "worker", "--max-seconds", f"{left:.0f}"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )

    threads = [threading.Thread(target=keep_draining) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.monotonic() - started


def _waiting(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM email_outbox WHERE status IN ('pending', 'processing')"
        ).fetchone()
    return int(row[0]) if row else 0


def _report(
    url: str,
    provider: FakeProviderClient,
    batch_size: int,
    rows: int,
    seconds: float,
    app: AppMail,
) -> Burst:
    stats = provider.stats()
    by_key: dict[str, int] = stats["requests_by_key"]
    receipt_requests = sum(n for key, n in by_key.items() if not key.startswith(APP_KEY_PREFIX))
    tagged = provider.tagged()
    tagged.pop("", None)  # the app's own mail carries no message_key tag
    with psycopg.connect(url) as conn:
        found = conn.execute("SELECT count(*) FROM email_outbox WHERE status = 'sent'").fetchone()
    return Burst(
        batch_size=batch_size,
        rows=rows,
        seconds=seconds,
        sent=int(found[0]) if found else 0,
        receipt_requests=receipt_requests,
        receipt_429s=int(stats["rate_limited"]) - app.refused,
        app_requests=app.sent,
        app_429s=app.refused,
        doubles=sum(n - 1 for n in tagged.values() if n > 1),
    )


@dataclass
class AppMail:
    """The app's own mail through the same team: how many it sent, how many were refused."""

    sent: int = 0
    refused: int = 0


@contextmanager
def app_mail(provider_url: str, rate: float) -> Iterator[AppMail]:
    """A thread sending one email every 1/``rate`` s, as the app's password resets would."""
    counts = AppMail()
    stop = threading.Event()

    def send() -> None:
        session = requests.Session()
        while not stop.wait(1.0 / rate if rate > 0 else 3600):
            body = {"from": "app@example.com", "to": ["user@example.com"], "subject": APP_SUBJECT}
            answer = session.post(
                f"{provider_url}/emails",
                json=body,
                headers={"Authorization": f"Bearer {API_KEY}",
                         "Idempotency-Key": f"{APP_KEY_PREFIX}{uuid.uuid4()}"},
                timeout=10,
            )  # fmt: skip
            counts.sent += 1
            counts.refused += answer.status_code == 429

    thread = threading.Thread(target=send, name="app-mail", daemon=True)
    thread.start()
    try:
        yield counts
    finally:
        stop.set()
        thread.join(timeout=15)


if __name__ == "__main__":
    sys.exit(main())
