"""Does a big history slow receipts down? Empty table against 1 million sent rows.

Run by hand (not part of the tests)::

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python -m bench.growth [--history 1000000] [--pending 5000] [--seconds 10]

Builds two throwaway databases: one empty, one holding ``--history`` sent
receipts spread over the last 500 days (frozen emails and attempt logs kept
for the last 30 days only, as ``receipts prune`` leaves them) and as many
events. On each it measures, in the same run: the drain rate of ``--pending``
fresh rows (``receipts worker`` at its defaults, provider at 0 ms), ingest
throughput and latency (wrk, 16 connections, signed unique events against
gunicorn) and the size of the ready-row index. Then it runs
``receipts prune`` on the big one and reports what it dropped, how long it
took and the sizes after.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass

import psycopg

from bench.common import (
    Gunicorn,
    LoadResult,
    measure_alone,
    run_wrk,
    server_url_or_exit,
    signed_events,
    throwaway_database,
    write_wrk_data,
)
from bench.drain import API_KEY, Drained, fake_provider, fill, run_measured
from tests.stripe_events import TEST_SECRET

HISTORY_SQL = """
INSERT INTO email_outbox (message_key, purpose, account, livemode, invoice_id, source_event_id,
                          fingerprint, payload, status, attempts, created_at, updated_at,
                          first_attempt_at, sent_at, provider_id)
SELECT 'platform/live/' || inv || '/invoice-paid', 'invoice-paid', 'platform', true, inv,
       'evt_' || inv, 'sha256:' || md5(inv),
       CASE WHEN age < interval '30 days' THEN jsonb_build_object(
           'from', 'billing@example.com', 'to', jsonb_build_array('jenny.rosen@example.com'),
           'subject', 'Receipt for ' || inv, 'text', repeat('Thanks. ', 100),
           'html', repeat('<p>Thanks.</p>', 100)) END,
       'sent', 1, now() - age, now() - age, now() - age, now() - age, 're_' || md5(inv)
  FROM (SELECT 'in_1Hist' || lpad(n::text, 8, '0') AS inv,
               make_interval(secs => (%(total)s - n) * 500.0 * 86400 / %(total)s) AS age
          FROM generate_series(1, %(total)s) AS n) AS history;

INSERT INTO stripe_events (event_id, event_type, account, livemode, outcome, message_key,
                           fingerprint, first_received_at, last_received_at)
SELECT source_event_id, 'invoice.paid', 'platform', true, 'queued', message_key, fingerprint,
       created_at, created_at
  FROM email_outbox;

INSERT INTO email_attempts (message_key, attempt, worker_id, lease_token, started_at,
                            finished_at, http_status, provider_id, outcome)
SELECT message_key, 1, 'bench', gen_random_uuid(), sent_at, sent_at, 200, provider_id, 'sent'
  FROM email_outbox WHERE payload IS NOT NULL;
"""

SIZES_SQL = """
SELECT pg_size_pretty(pg_relation_size('email_outbox_ready')) AS ready_index,
       pg_size_pretty(pg_relation_size('email_outbox_pkey')) AS key_index,
       pg_size_pretty(pg_total_relation_size('email_outbox')) AS outbox_total,
       pg_size_pretty(pg_total_relation_size('stripe_events')) AS events_total,
       pg_size_pretty(pg_total_relation_size('email_attempts')) AS attempts_total,
       (SELECT count(*) FROM email_outbox) AS outbox_rows
"""


@dataclass
class Figures:
    label: str
    drained: Drained
    ingest: LoadResult
    web_rss: list[float]
    sizes: dict[str, object]


@dataclass
class GrowthFigures:
    empty: Figures
    grown: Figures

    def changes(self) -> dict[str, float]:
        """Relative change, big history against empty, of the drain and ingest rates."""
        return {
            "drain": self.grown.drained.rate / max(self.empty.drained.rate, 1e-9) - 1,
            "ingest": self.grown.ingest.requests_per_second
            / max(self.empty.ingest.requests_per_second, 1e-9)
            - 1,
        }


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--pending", type=int, default=5000)
    parser.add_argument("--seconds", type=int, default=10)
    return parser


def main() -> int:
    measure_alone(parser, measure)
    return 0


def measure(args: argparse.Namespace) -> GrowthFigures:
    server_url = server_url_or_exit()
    with (
        throwaway_database(server_url, "receipts_bench_empty") as empty_url,
        throwaway_database(server_url, "receipts_bench_grown") as grown_url,
    ):
        started = time.monotonic()
        with psycopg.connect(grown_url, autocommit=True) as conn:
            for statement in HISTORY_SQL.split(";\n"):
                if statement.strip():
                    conn.execute(statement.encode(), {"total": args.history})
            conn.execute("VACUUM ANALYZE")
            # Flush the bulk load now, so its checkpoint does not land in a measurement.
            conn.execute("CHECKPOINT")
        print(f"history of {args.history} sent rows built in {time.monotonic() - started:.0f} s")
        results = [
            measure_one("empty", empty_url, args),
            measure_one(f"{args.history} sent", grown_url, args),
        ]
        for figures in results:
            print(report_line(figures))
        compare(*results)
        prune(grown_url)
    return GrowthFigures(*results)


def measure_one(label: str, url: str, args: argparse.Namespace) -> Figures:
    sizes_before = sizes(url)
    with Gunicorn(
        "wsgi:app",
        {
            "DATABASE_URL": url,
            "STRIPE_WEBHOOK_SECRET": TEST_SECRET,
            "EMAIL_FROM": "Billing <billing@example.com>",
        },
    ) as server:
        run_wrk(
            server.url,
            write_wrk_data(signed_events(400, "gw" + label[:1])),
            connections=4,
            seconds=1,
        )
        events = signed_events(3000 * args.seconds, "g" + label[:1])
        ingest = run_wrk(server.url, write_wrk_data(events), connections=16, seconds=args.seconds)
        web_rss = server.worker_peak_rss_mb()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "DELETE FROM email_attempts WHERE message_key IN "
            "(SELECT message_key FROM email_outbox WHERE status = 'pending')"
        )
        conn.execute(
            "DELETE FROM stripe_events WHERE message_key IN "
            "(SELECT message_key FROM email_outbox WHERE status = 'pending')"
        )
        conn.execute("DELETE FROM email_outbox WHERE status = 'pending'")
        conn.execute("VACUUM ANALYZE email_outbox")
    fill(url, args.pending)
    with fake_provider(0.0) as provider_url:
        drained = run_measured(
            [sys.executable, "-m", "receipts.cli", "worker"],
            {
                "PATH": "/usr/bin:/bin",
                "DATABASE_URL": url,
                "RESEND_API_KEY": API_KEY,
                "RESEND_API_URL": provider_url,
                "RECEIPTS_SEND_RATE": "0",  # the database's ceiling, not Resend's
                "LOG_FORMAT": "json",
            },
        )
    return Figures(label, drained, ingest, web_rss, sizes_before)


def sizes(url: str) -> dict[str, object]:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(SIZES_SQL).fetchone()
        assert row is not None
        names = [column.name for column in conn.execute(SIZES_SQL).description or []]
    return dict(zip(names, row, strict=True))


def report_line(figures: Figures) -> str:
    return (
        f"{figures.label:>13}: drain {figures.drained.rate:5.0f} rows/s "
        f"(worker peak RSS {figures.drained.peak_rss_mb:.0f} MB) | ingest "
        f"{figures.ingest.requests_per_second:5.0f} req/s p50 {figures.ingest.p50_ms:.1f} ms "
        f"p99 {figures.ingest.p99_ms:.1f} ms (web peak RSS "
        f"{', '.join(f'{mb:.0f}' for mb in figures.web_rss)} MB) | {figures.sizes}"
    )


def compare(empty: Figures, grown: Figures) -> None:
    def change(new: float, old: float) -> str:
        return f"{(new / old - 1) * 100:+.0f}%" if old else "n/a"

    print("big history against empty (goal: within 10%):")
    print(f"  drain rate   {change(grown.drained.rate, empty.drained.rate)}")
    rate = change(grown.ingest.requests_per_second, empty.ingest.requests_per_second)
    p50 = change(grown.ingest.p50_ms, empty.ingest.p50_ms)
    p99 = change(grown.ingest.p99_ms, empty.ingest.p99_ms)
    print(f"  ingest req/s {rate}, p50 {p50}, p99 {p99}")


def prune(url: str) -> None:
    for args in (["--dry-run"], []):
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "receipts.cli", "prune", *args],
            env={"PATH": "/usr/bin:/bin", "DATABASE_URL": url, "LOG_FORMAT": "json"},
            capture_output=True,
            text=True,
            check=True,
        )
        took = time.monotonic() - started
        print(f"receipts prune {' '.join(args)}: {result.stdout.strip()} ({took:.1f} s)")
    print(f"after prune: {sizes(url)}")


if __name__ == "__main__":
    sys.exit(main())
