"""A month-end burst at the provider's team limit: batches against single sends.

Run by hand (not part of the tests, nor yet of ``python -m bench``)::

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python -m bench.burst --rows 10000 [--batch-size 100 1] \\
        [--team-rate 5] [--app-rate 1] [--send-rate 4] [--max-minutes 15]

For each ``--batch-size`` it makes a throwaway database, writes ``--rows``
ready receipts straight into it, and starts the fake Resend as a process of
its own enforcing ``--team-rate`` requests per second for the whole team
(a sliding window, answering with Resend's ``ratelimit-*`` headers and 429
``rate_limit_exceeded`` over it). A thread stands in for the app sending its
own mail (password resets, sign-in links) through the same team limit at
``--app-rate`` requests per second. ``receipts worker`` runs as a process,
again until no receipt is left or ``--max-minutes`` pass (a drain run ends
early when the provider asks it to wait; cron would start the next).

It prints the time to drain, the provider requests receipts used, the 429s
receipts saw and the 429s the app saw, the receipts not sent, and doubles:
receipts the provider delivered more than once (each receipt's subject
names its invoice), which must be 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import requests

from bench.common import machine, server_url_or_exit, throwaway_database
from bench.drain import fill
from tests.fake_provider import FakeProviderClient

ROOT = Path(__file__).resolve().parent.parent
API_KEY = "re_bench_burst"
APP_KEY_PREFIX = "app/"


@dataclass(frozen=True)
class Burst:
    batch_size: int
    rows: int
    seconds: float
    receipt_requests: int
    receipt_429s: int
    app_requests: int
    app_429s: int
    unsent: int
    doubles: int

    def line(self) -> str:
        return (
            f"batch size {self.batch_size}: {self.rows - self.unsent}/{self.rows} sent in "
            f"{self.seconds:.1f} s, {self.receipt_requests} requests, "
            f"{self.receipt_429s} 429s for receipts; the app: {self.app_requests} requests, "
            f"{self.app_429s} 429s; unsent {self.unsent}, doubles {self.doubles}"
        )


def parser() -> argparse.ArgumentParser:
    parsed = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parsed.add_argument("--rows", type=int, default=10000)
    parsed.add_argument("--batch-size", type=int, nargs="+", default=[100])
    parsed.add_argument("--team-rate", type=int, default=5, help="the team's requests/s")
    parsed.add_argument("--app-rate", type=float, default=1.0, help="the app's own requests/s")
    parsed.add_argument(
        "--send-rate",
        type=float,
        default=4.0,
        help="RECEIPTS_SEND_RATE: the team rate less the app's",
    )
    parsed.add_argument("--max-minutes", type=float, default=15.0)
    return parsed


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    server_url = server_url_or_exit()
    print(f"machine: {machine()}")
    print(
        f"rows={args.rows} team rate={args.team_rate}/s app rate={args.app_rate}/s "
        f"RECEIPTS_SEND_RATE={args.send_rate}",
        flush=True,
    )
    for size in args.batch_size:
        print(burst(server_url, args, size).line(), flush=True)
    return 0


def burst(server_url: str, args: argparse.Namespace, batch_size: int) -> Burst:
    """One drain of ``args.rows`` fresh receipts at the team limit, with the app sending."""
    with (
        throwaway_database(server_url, "receipts_bench_burst") as url,
        rate_limited_provider(args.team_rate) as provider,
    ):
        fill(url, args.rows)
        env = {
            "PATH": os.environ.get("PATH", ""),
            "DATABASE_URL": url,
            "RESEND_API_KEY": API_KEY,
            "RESEND_API_URL": provider.url,
            "RECEIPTS_SEND_RATE": str(args.send_rate),
            "RECEIPTS_BATCH_SIZE": str(batch_size),
            "LOG_FORMAT": "json",
        }
        with app_mail(provider.url, args.app_rate) as app:
            seconds = drain(url, env, args.max_minutes * 60)
        return _report(url, provider, batch_size, args.rows, seconds, app)


def drain(url: str, env: dict[str, str], limit: float) -> float:
    """Run ``receipts worker`` again until no receipt is waiting or ``limit`` seconds pass."""
    started = time.monotonic()
    while time.monotonic() - started < limit and _waiting(url) > 0:
        subprocess.run(
            [sys.executable, "-m", "receipts.cli", "worker", "--max-seconds", str(limit)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
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
    subjects = Counter(
        _subject(delivery["body"])
        for delivery in provider.deliveries()
        if not delivery["key"].startswith(APP_KEY_PREFIX)
    )
    with psycopg.connect(url) as conn:
        found = conn.execute("SELECT count(*) FROM email_outbox WHERE status <> 'sent'").fetchone()
    return Burst(
        batch_size=batch_size,
        rows=rows,
        seconds=seconds,
        receipt_requests=receipt_requests,
        receipt_429s=int(stats["rate_limited"]) - app.refused,
        app_requests=app.sent,
        app_429s=app.refused,
        unsent=int(found[0]) if found else rows,
        doubles=sum(n - 1 for n in subjects.values() if n > 1),
    )


def _subject(body: str) -> str:
    return str(json.loads(body).get("subject", ""))


@contextmanager
def rate_limited_provider(team_rate: int) -> Iterator[FakeProviderClient]:
    """The fake Resend in a process of its own, at ``team_rate`` requests per second."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_provider", "--port", "0", "--api-key", API_KEY,
         "--rate-limit", str(team_rate)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        yield FakeProviderClient(process.stdout.readline().split()[-1])
    finally:
        process.terminate()
        process.wait()


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
            body = {"from": "app@example.com", "to": ["user@example.com"], "subject": "Sign in"}
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
