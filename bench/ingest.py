"""Ingest throughput: signed unique invoice.paid events posted with wrk, against baselines.

Run by hand (not part of the tests)::

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python -m bench.ingest [--seconds 10] [--connections 16 64]

In one run, on the same gunicorn settings (gunicorn.conf.py, with 2 workers x 4
threads, as when RESULTS.md was measured; the shipped file now runs 64 threads
per worker so slow clients cannot hold them all), it serves in turn: a bare
Flask 200, the minimal ceiling (``verify_header`` + ``json.loads`` + one
insert), the tutorial design (``construct_event`` + the same insert) and
receipts itself (``wsgi:app``).
Every event is signed just before its load run (Stripe's 300 s tolerance) and
posted once; receipts is then sent every event again, to measure the
duplicate-delivery path. Prints req/s, p50/p99, the ratios against the goals
and the peak RSS of the web workers.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import psycopg

from bench.baselines import CREATE_TABLE
from bench.common import (
    Gunicorn,
    LoadResult,
    machine,
    ratio,
    run_wrk,
    server_url_or_exit,
    sign_invoices,
    signed_events,
    throwaway_database,
    write_wrk_data,
)
from tests.stripe_events import TEST_SECRET

APPS = {
    "bare": "bench.baselines:bare()",
    "minimal": "bench.baselines:minimal()",
    "articles": "bench.baselines:articles()",
    "receipts": "wsgi:app",
}


@dataclass
class Measured:
    app: str
    connections: int
    result: LoadResult


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--apps", nargs="+", choices=list(APPS), default=list(APPS))
    parser.add_argument(
        "--events-per-second", type=int, default=4000, help="unique events signed per run second"
    )
    args = parser.parse_args()
    server_url = server_url_or_exit()
    print(f"machine: {machine()}")
    print(f"wrk: 2 threads, {args.seconds} s per run; gunicorn: 2 workers x 4 threads\n")
    results: list[Measured] = []
    duplicates: LoadResult | None = None
    with throwaway_database(server_url, "receipts_bench_ingest") as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(CREATE_TABLE)
        environ = {
            "DATABASE_URL": url,
            "STRIPE_WEBHOOK_SECRET": TEST_SECRET,
            "EMAIL_FROM": "Billing <billing@example.com>",
        }
        for app in args.apps:
            with Gunicorn(APPS[app], environ) as server:
                warm_up(server)
                for connections in args.connections:
                    tag = f"{app[:3]}{connections}"
                    events = signed_events(args.events_per_second * args.seconds, tag)
                    result = run_wrk(
                        server.url,
                        write_wrk_data(events),
                        connections=connections,
                        seconds=args.seconds,
                    )
                    results.append(Measured(app, connections, result))
                    print(f"{app:9} c={connections:<3} {result.line()}", flush=True)
                if app == "receipts":
                    duplicates = redeliver(server, args, url)
                peaks = server.worker_peak_rss_mb()
                print(f"{app:9} peak RSS per web worker: {format_mb(peaks)}\n", flush=True)
    report(results, duplicates, args.connections)
    return 0


def warm_up(server: Gunicorn) -> None:
    events = signed_events(400, "warm")
    run_wrk(server.url, write_wrk_data(events), connections=4, seconds=1)


def redeliver(server: Gunicorn, args: argparse.Namespace, url: str) -> LoadResult:
    """Every event the first receipts run stored, again and freshly signed: all duplicates."""
    connections = args.connections[0]
    with psycopg.connect(url) as conn:
        stored = [
            row[0]
            for row in conn.execute(
                "SELECT invoice_id FROM email_outbox WHERE invoice_id LIKE %s",
                (f"in_1Brec{connections}%",),
            )
        ]
    before = len(stored)
    result = run_wrk(
        server.url,
        write_wrk_data(sign_invoices(stored)),
        connections=connections,
        seconds=args.seconds,
    )
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM email_outbox WHERE invoice_id LIKE %s",
            (f"in_1Brec{connections}%",),
        ).fetchone()
    new_rows = (row[0] if row else 0) - before
    print(
        f"{'receipts':9} c={connections:<3} {result.line()}  "
        f"(redeliveries of {before} stored events; new rows: {new_rows})",
        flush=True,
    )
    return result


def format_mb(values: list[float]) -> str:
    return ", ".join(f"{value:.0f} MB" for value in values) or "n/a"


def report(results: list[Measured], duplicates: LoadResult | None, connections: list[int]) -> None:
    def find(app: str, c: int) -> LoadResult | None:
        return next((m.result for m in results if m.app == app and m.connections == c), None)

    print("ratios (receipts against the baselines, same run):")
    for c in connections:
        ours = find("receipts", c)
        if ours is None:
            continue
        line = f"  c={c:<3}"
        for app, goal in (("bare", None), ("minimal", 0.7), ("articles", 1.5)):
            other = find(app, c)
            if other is None:
                continue
            verdict = ""
            if goal is not None:
                met = ours.requests_per_second >= goal * other.requests_per_second
                verdict = f" (goal >= {goal}x: {'met' if met else 'MISSED'})"
            line += f"  vs {app} {ratio(ours.requests_per_second, other.requests_per_second)}"
            line += verdict
        print(line)
    ours16 = find("receipts", 16)
    if ours16 is not None:
        met = "met" if ours16.p99_ms <= 25 else "MISSED"
        print(f"  p99 at 16 connections: {ours16.p99_ms:.1f} ms (goal <= 25 ms: {met})")
    if duplicates is not None:
        print(f"  duplicate deliveries: {duplicates.line().strip()}")


if __name__ == "__main__":
    sys.exit(main())
