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
posted once; receipts is then sent the events its first run stored again,
freshly signed (each several times when the run has time for more requests
than there are stored events), to measure the duplicate-delivery path.
Prints req/s, p50/p99, the ratios against the goals and the peak RSS of the
web workers.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field

import psycopg

from bench.baselines import CREATE_TABLE
from bench.common import (
    Gunicorn,
    LoadResult,
    measure_alone,
    ratio,
    run_wrk,
    server_url_or_exit,
    sign_invoices,
    signed_events,
    throwaway_database,
    write_wrk_data,
)
from bench.goals import Goal
from tests.stripe_events import TEST_SECRET

APPS = {
    "bare": "bench.baselines:bare()",
    "minimal": "bench.baselines:minimal()",
    "articles": "bench.baselines:articles()",
    "receipts": "wsgi:app",
}


# The goals, against the same run's baselines at GOAL_CONNECTIONS.
GOAL_CONNECTIONS = 16
UNIQUE_VS_MINIMAL = 0.8
REDELIVERY_VS_MINIMAL = 1.0
P99_VS_MINIMAL = 1.5
VS_ARTICLES = 1.1


@dataclass
class Measured:
    app: str
    connections: int
    result: LoadResult


@dataclass
class IngestFigures:
    results: list[Measured] = field(default_factory=list)
    duplicates: LoadResult | None = None
    duplicate_connections: int = GOAL_CONNECTIONS
    new_rows_on_redelivery: int = 0
    web_peak_mb: dict[str, list[float]] = field(default_factory=dict)

    def find(self, app: str, connections: int) -> LoadResult | None:
        found = (m.result for m in self.results if m.app == app and m.connections == connections)
        return next(found, None)

    def goals(self) -> list[Goal]:
        c = GOAL_CONNECTIONS
        ours, minimal, articles = (self.find(app, c) for app in ("receipts", "minimal", "articles"))
        return [
            _rate_goal(
                f"unique events >= {UNIQUE_VS_MINIMAL}x minimal at {c} connections",
                ours,
                minimal,
                UNIQUE_VS_MINIMAL,
            ),
            _rate_goal(
                f"redeliveries >= {REDELIVERY_VS_MINIMAL}x minimal "
                f"(at {self.duplicate_connections} connections)",
                self.duplicates,
                self.find("minimal", self.duplicate_connections),
                REDELIVERY_VS_MINIMAL,
            ),
            _p99_goal(ours, minimal),
            _rate_goal(
                f"unique events >= {VS_ARTICLES}x articles at {c} connections",
                ours,
                articles,
                VS_ARTICLES,
            ),
        ]


def _rate_goal(text: str, ours: LoadResult | None, other: LoadResult | None, factor: float) -> Goal:
    if ours is None or other is None or not other.requests_per_second:
        return Goal("ingest", text)
    measured = (
        f"{ratio(ours.requests_per_second, other.requests_per_second)} "
        f"({ours.requests_per_second:.0f} vs {other.requests_per_second:.0f} req/s)"
    )
    return Goal(
        "ingest", text, measured, ours.requests_per_second >= factor * other.requests_per_second
    )


def _p99_goal(ours: LoadResult | None, minimal: LoadResult | None) -> Goal:
    text = f"p99 at {GOAL_CONNECTIONS} connections <= {P99_VS_MINIMAL}x minimal's p99"
    if ours is None or minimal is None:
        return Goal("ingest", text)
    measured = (
        f"{ours.p99_ms:.1f} ms vs {minimal.p99_ms:.1f} ms = {ratio(ours.p99_ms, minimal.p99_ms)}"
    )
    return Goal("ingest", text, measured, ours.p99_ms <= P99_VS_MINIMAL * minimal.p99_ms)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--apps", nargs="+", choices=list(APPS), default=list(APPS))
    parser.add_argument(
        "--events-per-second", type=int, default=4000, help="unique events signed per run second"
    )
    return parser


def main() -> int:
    measure_alone(parser, measure)
    return 0


def measure(args: argparse.Namespace) -> IngestFigures:
    server_url = server_url_or_exit()
    print(f"wrk: 2 threads, {args.seconds} s per run; gunicorn: 2 workers x 4 threads\n")
    figures = IngestFigures(duplicate_connections=args.connections[0])
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
                    # The bare app outruns the others: give it enough events not to wrap.
                    per_second = args.events_per_second * (2 if app == "bare" else 1)
                    events = signed_events(per_second * args.seconds, tag)
                    result = run_wrk(
                        server.url,
                        write_wrk_data(events),
                        connections=connections,
                        seconds=args.seconds,
                    )
                    figures.results.append(Measured(app, connections, result))
                    print(f"{app:9} c={connections:<3} {result.line()}", flush=True)
                if app == "receipts":
                    figures.duplicates, figures.new_rows_on_redelivery = redeliver(
                        server, args, url
                    )
                peaks = server.worker_peak_rss_mb()
                figures.web_peak_mb[app] = peaks
                print(f"{app:9} peak RSS per web worker: {format_mb(peaks)}\n", flush=True)
    report(figures, args.connections)
    return figures


def warm_up(server: Gunicorn) -> None:
    events = signed_events(400, "warm")
    run_wrk(server.url, write_wrk_data(events), connections=4, seconds=1)


def redeliver(server: Gunicorn, args: argparse.Namespace, url: str) -> tuple[LoadResult, int]:
    """The events the first receipts run stored, again and freshly signed: all duplicates.

    Each stored event is in the load as many times as it takes to fill the run
    (a redelivery is a redelivery, however often), so wrk never runs out. The
    rows are read once the count has settled: wrk stops at its deadline with
    requests still in the server, whose rows commit after it has returned.
    """
    connections = args.connections[0]
    pattern = f"in_1Brec{connections}{'_' * 7}"  # the tag, then 7 digits
    before = settled_count(url, pattern)
    with psycopg.connect(url) as conn:
        stored = [
            row[0]
            for row in conn.execute(
                "SELECT invoice_id FROM email_outbox WHERE invoice_id LIKE %s", (pattern,)
            )
        ]
    wanted = args.events_per_second * args.seconds
    repeated = (stored * math.ceil(wanted / max(1, len(stored))))[:wanted]
    result = run_wrk(
        server.url,
        write_wrk_data(sign_invoices(repeated)),
        connections=connections,
        seconds=args.seconds,
    )
    new_rows = settled_count(url, pattern) - before
    print(
        f"{'receipts':9} c={connections:<3} {result.line()}  "
        f"(redeliveries of {before} stored events; new rows: {new_rows})",
        flush=True,
    )
    return result, new_rows


def settled_count(url: str, pattern: str) -> int:
    """Rows for ``pattern`` once two reads 0.5 s apart agree (requests still in flight land)."""
    last = -1
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM email_outbox WHERE invoice_id LIKE %s", (pattern,)
            ).fetchone()
            count = row[0] if row else 0
            if count == last:
                return count
            last = count
            time.sleep(0.5)


def format_mb(values: list[float]) -> str:
    return ", ".join(f"{value:.0f} MB" for value in values) or "n/a"


def report(figures: IngestFigures, connections: list[int]) -> None:
    print("ratios (receipts against the baselines, same run):")
    for c in connections:
        ours = figures.find("receipts", c)
        if ours is None:
            continue
        line = f"  c={c:<3}"
        for app in ("bare", "minimal", "articles"):
            other = figures.find(app, c)
            if other is not None:
                line += f"  vs {app} {ratio(ours.requests_per_second, other.requests_per_second)}"
        print(line)
    if figures.duplicates is not None:
        print(
            f"  duplicate deliveries: {figures.duplicates.line().strip()}, "
            f"new rows {figures.new_rows_on_redelivery}"
        )
    for goal in figures.goals():
        print(f"  {goal.goal}: {goal.measured} ({goal.verdict})")


if __name__ == "__main__":
    sys.exit(main())
