"""How fast one ``receipts worker`` drains the outbox, against the latency bound.

Run by hand (not part of the tests)::

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python -m bench.drain [--rows 2000] [--concurrency 8] [--latency 0 0.05]

For each provider latency it creates a throwaway database, fills it with
pending rows, starts the fake provider in another process, runs
``receipts worker`` as a process and prints rows/second drained (from the
worker's own summary, so interpreter start-up is not counted), and the ratio
against the latency bound ``concurrency / latency``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg

from receipts.embedded import with_database
from receipts.migrations import migrate

ROOT = Path(__file__).resolve().parent.parent
API_KEY = "re_bench"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--latency", type=float, nargs="+", default=[0.0, 0.05])
    args = parser.parse_args()
    server_url = os.environ.get("DATABASE_URL")
    if not server_url:
        print("bench/drain.py: set DATABASE_URL to a PostgreSQL server", file=sys.stderr)
        return 2
    print(f"rows={args.rows} concurrency={args.concurrency}")
    for latency in args.latency:
        seconds, sent = drain_once(server_url, args.rows, args.concurrency, latency)
        rate = sent / seconds
        line = f"latency={latency * 1000:.0f}ms sent={sent} seconds={seconds:.2f} rows/s={rate:.0f}"
        if latency > 0:
            bound = args.concurrency / latency
            line += f" bound={bound:.0f}/s ratio={rate / bound:.2f}"
        print(line, flush=True)
    return 0


def drain_once(server_url: str, rows: int, concurrency: int, latency: float) -> tuple[float, int]:
    name = f"receipts_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = with_database(server_url, name)
    fake = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fake_provider",
            "--port",
            "0",
            "--latency",
            str(latency),
            "--api-key",
            API_KEY,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        migrate(url)
        fill(url, rows)
        assert fake.stdout is not None
        fake_url = fake.stdout.readline().split()[-1]
        return run_worker(url, fake_url, concurrency)
    finally:
        fake.terminate()
        fake.wait()
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fill(url: str, rows: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            """INSERT INTO email_outbox (message_key, purpose, account, livemode, invoice_id,
                                         source_event_id, fingerprint, payload)
               SELECT 'platform/test/' || inv || '/invoice-paid', 'invoice-paid', 'platform',
                      false, inv, 'evt_' || inv, 'sha256:' || inv,
                      jsonb_build_object('from', 'billing@example.com',
                                         'to', jsonb_build_array('jenny.rosen@example.com'),
                                         'subject', 'Receipt for ' || inv,
                                         'text', repeat('Thanks. ', 100),
                                         'html', repeat('<p>Thanks.</p>', 100))
                 FROM (SELECT 'in_1Bench' || lpad(n::text, 7, '0') AS inv
                         FROM generate_series(1, %s) AS n) AS invoices""",
            (rows,),
        )


def run_worker(url: str, fake_url: str, concurrency: int) -> tuple[float, int]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "DATABASE_URL": url,
        "RESEND_API_KEY": API_KEY,
        "RESEND_API_URL": fake_url,
        "LOG_FORMAT": "json",
    }
    result = subprocess.run(
        [sys.executable, "-m", "receipts.cli", "worker", "--concurrency", str(concurrency)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    fields = dict(part.split("=", 1) for part in result.stdout.split(": ", 1)[1].split())
    return float(fields["seconds"]), int(fields["sent"])


if __name__ == "__main__":
    sys.exit(main())
