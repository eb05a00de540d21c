"""Does ``receipts worker`` keep to Resend's rate limit? 200 receipts against a fake at 5/s.

Run by hand (not part of the tests)::

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python -m bench.pacing [--rows 200] [--rate-limit 5] [--latency 0 0.1]

For each provider latency it fills a throwaway database with ``--rows``
pending receipts, starts the fake provider as a process enforcing
``--rate-limit`` requests per second (a sliding one-second window, with
Resend's ``ratelimit-limit`` / ``-remaining`` / ``-reset`` headers and 429
``rate_limit_exceeded`` over it) and runs ``receipts worker`` as a process
with the shipped defaults: ``RECEIPTS_SEND_RATE`` unset (Resend's documented
5/s) and ``--concurrency 8``. It prints the 429s the fake gave, the requests
it saw, the span from the first request to the last, the worker's own run
time, and that time against ``rows / rate-limit`` (the least the limit
allows): the goal is no 429 and within 10 % of it. For contrast it runs the
same rows with ``RECEIPTS_SEND_RATE=0`` (no cap): only the provider's 429s
and pauses hold it back.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.common import fake_provider_process, machine, server_url_or_exit, throwaway_database
from bench.drain import API_KEY, Drained, fill, run_measured

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Paced:
    drained: Drained
    requests: int
    rate_limited: int
    span: float  # seconds from the first request the fake saw to the last

    def line(self, goal: float) -> str:
        return (
            f"sent {self.drained.sent}, requests {self.requests}, 429s {self.rate_limited}, "
            f"first to last request {self.span:.2f} s, worker {self.drained.seconds:.2f} s "
            f"= {self.drained.seconds / goal:.3f} x the {goal:.0f} s the limit allows"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--rate-limit", type=int, default=5)
    parser.add_argument("--latency", type=float, nargs="+", default=[0.0, 0.1])
    parser.add_argument("--no-contrast", action="store_true", help="skip the uncapped run")
    args = parser.parse_args()
    server_url = server_url_or_exit()
    goal = args.rows / args.rate_limit
    print(f"machine: {machine()}")
    print(f"rows={args.rows} fake rate limit={args.rate_limit}/s (sliding 1 s window)")
    failed = False
    for latency in args.latency:
        runs: list[tuple[str, dict[str, str]]] = [("defaults", {})]
        if not args.no_contrast:
            runs.append(("RECEIPTS_SEND_RATE=0", {"RECEIPTS_SEND_RATE": "0"}))
        for label, extra in runs:
            paced = pace_once(server_url, args, latency, extra)
            print(f"latency={latency * 1000:3.0f}ms {label}: {paced.line(goal)}", flush=True)
            if label == "defaults":
                met = paced.rate_limited == 0 and paced.drained.seconds <= 1.1 * goal
                failed = failed or not met
                verdict = "met" if met else "MISSED"
                print(f"    goal (no 429, within 10 % of {goal:.0f} s): {verdict}")
    return 1 if failed else 0


def pace_once(
    server_url: str, args: argparse.Namespace, latency: float, extra: dict[str, str]
) -> Paced:
    with (
        throwaway_database(server_url, "receipts_bench_pacing") as url,
        fake_provider_process(API_KEY, rate_limit=args.rate_limit, latency=latency) as provider,
    ):
        fill(url, args.rows)
        env = {
            "PATH": os.environ.get("PATH", ""),
            "DATABASE_URL": url,
            "RESEND_API_KEY": API_KEY,
            "RESEND_API_URL": provider.url,
            "LOG_FORMAT": "json",
            **extra,
        }
        drained = run_measured([sys.executable, "-m", "receipts.cli", "worker"], env)
        stats = provider.stats()
        arrivals = provider.arrivals()
    return Paced(
        drained=drained,
        requests=stats["requests"],
        rate_limited=stats["rate_limited"],
        span=arrivals[-1] - arrivals[0] if arrivals else 0.0,
    )


if __name__ == "__main__":
    sys.exit(main())
