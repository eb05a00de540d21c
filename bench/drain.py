"""How fast ``receipts worker`` drains the outbox, against the latency bound and a baseline.

Run by hand (not part of the tests)::

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python -m bench.drain [--rows 20000] [--concurrency 8 64] \\
        [--latency 0 0.05] [--max-seconds 30]

For each provider latency and each ``--concurrency`` it creates a throwaway
database, fills it with pending rows, starts the fake provider in another
process, runs ``receipts worker`` as a process and prints rows/second drained
(from the worker's own summary, so interpreter start-up is not counted), the
ratio against the latency bound ``concurrency / latency``, the worker's CPU
time per row and its peak RSS. In the same run it drains the same rows with the source articles'
loop (bench/article_worker.py: claim, send and mark one row per transaction)
and prints our rate against it. ``--max-seconds`` caps each run (the rate is
then measured on the rows sent so far).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench.common import machine, server_url_or_exit, throwaway_database

ROOT = Path(__file__).resolve().parent.parent
API_KEY = "re_bench"


@dataclass(frozen=True)
class Drained:
    sent: int
    seconds: float
    peak_rss_mb: float
    cpu_seconds: float  # user + system time of the draining process, start-up included

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--latency", type=float, nargs="+", default=[0.0, 0.05])
    parser.add_argument("--max-seconds", type=float, default=30.0)
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args()
    server_url = server_url_or_exit()
    print(f"machine: {machine()}")
    print(f"rows={args.rows} max-seconds={args.max_seconds}")
    for latency in args.latency:
        baseline = None
        if not args.no_baseline:
            baseline = drain_once(server_url, args, latency, concurrency=None)
            print(f"latency={latency * 1000:3.0f}ms baseline (1 row/transaction): {line(baseline)}")
        for concurrency in args.concurrency:
            ours = drain_once(server_url, args, latency, concurrency)
            text = f"latency={latency * 1000:3.0f}ms receipts worker --concurrency {concurrency}: "
            text += line(ours)
            if latency > 0:
                bound = concurrency / latency
                text += f"  bound {bound:.0f}/s, ratio {ours.rate / bound:.2f} (goal >= 0.9)"
            if baseline is not None and baseline.rate:
                text += f"  vs baseline {ours.rate / baseline.rate:.1f}x"
                if latency == 0:
                    text += " (goal >= 2.5x and <= 0.6 ms CPU/row)"
            print(text, flush=True)
    return 0


def line(drained: Drained) -> str:
    return (
        f"sent {drained.sent} in {drained.seconds:.2f} s = {drained.rate:.0f} rows/s, "
        f"CPU {drained.cpu_seconds * 1000 / max(1, drained.sent):.2f} ms/row, "
        f"peak RSS {drained.peak_rss_mb:.0f} MB"
    )


def drain_once(
    server_url: str,
    args: argparse.Namespace,
    latency: float,
    concurrency: int | None,
    *,
    unrendered: bool = False,
) -> Drained:
    """One drain of fresh rows; ``concurrency`` None runs the articles' loop instead;
    ``unrendered`` rows are stored as the webhook stores them (the worker renders each)."""
    with (
        throwaway_database(server_url, "receipts_bench_drain") as url,
        fake_provider(latency) as provider_url,
    ):
        fill(url, args.rows, as_the_webhook_stores_them=unrendered)
        if concurrency is None:
            command = [
                "-m",
                "bench.article_worker",
                url,
                provider_url,
                API_KEY,
                str(args.max_seconds),
            ]
        else:
            command = [
                "-m",
                "receipts.cli",
                "worker",
                "--concurrency",
                str(concurrency),
                "--max-seconds",
                str(args.max_seconds),
            ]
        env = {
            "PATH": os.environ.get("PATH", ""),
            "DATABASE_URL": url,
            "RESEND_API_KEY": API_KEY,
            "RESEND_API_URL": provider_url,
            "RECEIPTS_SEND_RATE": "0",  # the worker's own ceiling, not Resend's
            "LOG_FORMAT": "json",
        }
        return run_measured([sys.executable, *command], env)


@contextlib.contextmanager
def fake_provider(latency: float) -> Iterator[str]:
    process = subprocess.Popen(
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
        assert process.stdout is not None
        yield process.stdout.readline().split()[-1]
    finally:
        process.terminate()
        process.wait()


def fill(url: str, rows: int, *, as_the_webhook_stores_them: bool = False) -> None:
    """``rows`` pending rows, each with its email rendered (as a retry finds it), or,
    ``as_the_webhook_stores_them``, with what the worker renders it from at the first claim."""
    if as_the_webhook_stores_them:
        _fill_unrendered(url, rows)
        return
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
        conn.execute("VACUUM ANALYZE email_outbox")


_TEMPLATE_INVOICE = "in_1BenchTemplate"


def _fill_unrendered(url: str, rows: int) -> None:
    """Rows exactly as ingest stores a one-line paid invoice: render_input, no payload."""
    from receipts.ingest.verification import decode_event
    from receipts.receipt.derivation import ReceiptJob, derive_receipt
    from tests.stripe_events import encode, event, invoice

    header, _ = decode_event(encode(event(invoice(id=_TEMPLATE_INVOICE))).decode())
    job = derive_receipt(header, email_from="Billing <billing@example.com>")
    assert isinstance(job, ReceiptJob)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            """INSERT INTO email_outbox (message_key, purpose, account, livemode, invoice_id,
                                         source_event_id, fingerprint, render_input,
                                         customer_email)
               SELECT 'platform/test/' || inv || '/invoice-paid', 'invoice-paid', 'platform',
                      false, inv, 'evt_' || inv, 'sha256:' || inv,
                      replace(%s, %s, inv)::json, %s
                 FROM (SELECT 'in_1Bench' || lpad(n::text, 7, '0') AS inv
                         FROM generate_series(1, %s) AS n) AS invoices""",
            (json.dumps(job.render_input), _TEMPLATE_INVOICE, job.recipient, rows),
        )
        conn.execute("VACUUM ANALYZE email_outbox")


def run_measured(command: list[str], env: dict[str, str]) -> Drained:
    """Run to completion; parse ``sent=N … seconds=S``; CPU time and peak RSS of the child.

    Peak RSS is the kernel's VmHWM of the running program, sampled until it
    exits: ``ru_maxrss`` would also count the benchmark's own memory, which
    the child carries until its ``exec``.
    """
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    peak_kb = [0]
    sampler = threading.Thread(target=_sample_peak_rss, args=(process.pid, peak_kb), daemon=True)
    sampler.start()
    assert process.stdout is not None
    output = process.stdout.read()
    sampler.join()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{command[2]} exited {process.returncode}: {output}")
    summary = output.strip().splitlines()[-1].split(": ", 1)[-1]
    fields = dict(part.split("=", 1) for part in summary.split() if "=" in part)
    return Drained(
        sent=int(fields["sent"]),
        seconds=float(fields["seconds"]),
        peak_rss_mb=peak_kb[0] / 1024,
        cpu_seconds=usage.ru_utime + usage.ru_stime,
    )


def _sample_peak_rss(pid: int, peak_kb: list[int]) -> None:
    """Keep the latest VmHWM of ``pid`` (monotonic) until the process has exited."""
    status = Path(f"/proc/{pid}/status")
    while True:
        try:
            text = status.read_text()
        except OSError:
            return
        if "VmHWM" not in text:  # a zombie: exited, not yet reaped
            return
        for line in text.splitlines():
            if line.startswith("VmHWM:"):
                peak_kb[0] = max(peak_kb[0], int(line.split()[1]))
        time.sleep(0.05)


@dataclass(frozen=True)
class DrainFigures:
    """What python -m bench's goal table needs from the drain."""

    baseline: Drained  # the articles' loop, provider at 0 ms
    fast: Drained  # receipts worker at its default concurrency, provider at 0 ms
    first_claim: Drained  # the same on rows as the webhook stores them: each one rendered
    slow: Drained  # the same, provider at ``latency``
    concurrency: int
    latency: float


def figures(rows: int, max_seconds: float, latency: float = 0.05) -> DrainFigures:
    """Drain fresh rows three times (baseline and default worker at 0 ms, worker at
    ``latency``), printing each run as main() does."""
    from receipts.delivery.worker import DEFAULT_CONCURRENCY

    server_url = server_url_or_exit()
    args = argparse.Namespace(rows=rows, max_seconds=max_seconds)
    print(f"rows={rows} max-seconds={max_seconds}")
    baseline = drain_once(server_url, args, 0.0, concurrency=None)
    print(f"latency=  0ms baseline (1 row/transaction): {line(baseline)}", flush=True)
    fast = drain_once(server_url, args, 0.0, DEFAULT_CONCURRENCY)
    print(
        f"latency=  0ms receipts worker --concurrency {DEFAULT_CONCURRENCY}: {line(fast)}  "
        f"vs baseline {fast.rate / max(baseline.rate, 1e-9):.2f}x",
        flush=True,
    )
    first_claim = drain_once(server_url, args, 0.0, DEFAULT_CONCURRENCY, unrendered=True)
    print(
        f"latency=  0ms receipts worker --concurrency {DEFAULT_CONCURRENCY}, rows as the "
        f"webhook stores them (rendered at the first claim): {line(first_claim)}  "
        f"vs baseline {first_claim.rate / max(baseline.rate, 1e-9):.2f}x",
        flush=True,
    )
    slow = drain_once(server_url, args, latency, DEFAULT_CONCURRENCY)
    bound = DEFAULT_CONCURRENCY / latency
    print(
        f"latency={latency * 1000:3.0f}ms receipts worker --concurrency {DEFAULT_CONCURRENCY}: "
        f"{line(slow)}  bound {bound:.0f}/s, ratio {slow.rate / bound:.2f}",
        flush=True,
    )
    return DrainFigures(baseline, fast, first_claim, slow, DEFAULT_CONCURRENCY, latency)


if __name__ == "__main__":
    sys.exit(main())
