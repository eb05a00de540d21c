"""Payment to inbox: from a webhook's 200 to the provider receiving the send, at steady rates.

Run by hand (not part of the tests)::

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python -m bench.latency [--seconds 30] [--rates 50 100 150 200 300]

For each rate, on a fresh throwaway database: gunicorn serves ``wsgi:app``
with the deployed settings (gunicorn.conf.py, 2 workers), the fake provider
answers at 0 ms in a process of its own, and ``receipts worker --loop`` runs
as a process (``RECEIPTS_SEND_RATE=0``: the worker's own speed, not Resend's
cap). An open-loop load generator (threads, each with one keep-alive
connection, each event sent at its scheduled time whatever the answers before
it) posts signed unique ``invoice.paid`` events at the rate for
``--seconds`` and notes the wall-clock time each 200 arrived; the fake notes
the wall-clock time each send arrived, by Idempotency-Key (the message key).
Latency is the difference, per receipt; it can be negative, since the row is
committed (and the worker woken) before the web worker writes the 200, and on
a saturated machine that answer, or the generator's noting it, can lag the
send (the minimum is printed as a check). After the load it waits up to
``--grace`` seconds for the backlog; a receipt not delivered by then counts
as infinitely late. Prints per rate the events sent and answered, receipts
delivered, p50/p95/p99/max, the backlog (rows pending or in flight, sampled
every 0.5 s), CPU per row of the worker and of the web workers, how busy the
whole machine was, and double sends; then the knee: the lowest rate whose p99
passes 250 ms.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

from bench.common import (
    BIN,
    ROOT,
    BoxCpu,
    Gunicorn,
    connection_peak,
    cpu_seconds,
    measure_alone,
    peak_rss_mb,
    server_url_or_exit,
    sign_invoices,
    throwaway_database,
)
from bench.drain import API_KEY, fake_provider
from tests.fake_provider import FakeProviderClient
from tests.stripe_events import TEST_SECRET

KNEE_MS = 250.0
GOAL_RATE = 150
GOAL_P99_MS = 25.0
CRON_NOTE = (
    "cron mode (`receipts worker` from the platform's scheduler, no --loop) is not run: "
    "a receipt waits for the next run, up to the cron interval (Heroku Scheduler 10 min, "
    "Render cron 1 min), plus the drain itself"
)
# application_name of each process's connections (libpq reads PGAPPNAME)
WEB_APP, WORKER_APP = "bench-web", "bench-worker"
BACKLOG_SQL = "SELECT count(*) FROM email_outbox WHERE status IN ('pending', 'processing')"


@dataclass
class RateFigures:
    rate: int
    sent: int
    answered: int  # 200s
    delivered: int  # answered events whose send reached the provider by the end of the grace
    latencies_ms: list[float]  # one per answered event; inf when not delivered
    backlog_max: int
    backlog_end: int  # when the load stopped
    backlog_growth: float  # rows per second, least squares over the load
    worker_cpu_ms_per_row: float
    web_cpu_ms_per_request: float
    box_busy: float
    double_sends: int  # keys the provider accepted more than once
    repeat_requests: int  # keys sent more than once (replays included)
    worker_peak_mb: float
    web_peak_mb: list[float]
    errors: int  # load generator: non-200 answers and failed requests
    connections: dict[str, int]  # the most database connections at once, per process kind
    load_cpu_ms_per_event: float  # this process (the load generator and its samplers)

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        if not ordered:
            return math.nan
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]

    @property
    def p99_ms(self) -> float:
        return self.percentile(99)

    def line(self) -> str:
        def ms(value: float) -> str:
            return "never" if math.isinf(value) else f"{value:.1f} ms"

        return (
            f"{self.rate:4}/s: sent {self.sent}, 200s {self.answered}, errors {self.errors}, "
            f"delivered {self.delivered}; latency min {ms(self.percentile(0))} "
            f"p50 {ms(self.percentile(50))} "
            f"p95 {ms(self.percentile(95))} p99 {ms(self.p99_ms)} max {ms(self.percentile(100))}"
            f"\n       backlog max {self.backlog_max}, at load end {self.backlog_end}, growth "
            f"{self.backlog_growth:+.1f} rows/s; CPU worker {self.worker_cpu_ms_per_row:.2f} "
            f"ms/row, web {self.web_cpu_ms_per_request:.2f} ms/request, load generator "
            f"{self.load_cpu_ms_per_event:.2f} ms/event; machine busy "
            f"{self.box_busy:.0%}; double sends {self.double_sends}, keys sent twice "
            f"{self.repeat_requests}; peak RSS worker {self.worker_peak_mb:.0f} MB, web "
            f"{', '.join(f'{mb:.0f}' for mb in self.web_peak_mb)} MB; database connections at "
            f"most: web {self.connections.get(WEB_APP, 0)}, worker "
            f"{self.connections.get(WORKER_APP, 0)}"
        )


@dataclass
class LatencyFigures:
    rates: list[RateFigures] = field(default_factory=list)

    def at(self, rate: int) -> RateFigures | None:
        return next((figures for figures in self.rates if figures.rate == rate), None)

    @property
    def knee(self) -> int | None:
        """The lowest rate whose p99 passes 250 ms; None: no rate measured does."""
        return next((f.rate for f in self.rates if not f.p99_ms <= KNEE_MS), None)

    def knee_text(self) -> str:
        if not self.rates:
            return "n/a"
        if self.knee is None:
            return f"> {max(f.rate for f in self.rates)}/s (no rate measured passes {KNEE_MS:g} ms)"
        return f"{self.knee}/s"


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rates", type=int, nargs="+", default=[50, 100, 150, 200, 300])
    parser.add_argument("--grace", type=float, default=10.0, help="seconds to wait for the backlog")
    parser.add_argument("--connections", type=int, default=32, help="load generator connections")
    return parser


def main() -> int:
    measure_alone(parser, measure)
    return 0


def measure(args: argparse.Namespace) -> LatencyFigures:
    server_url = server_url_or_exit()
    print(
        f"{args.seconds:g} s per rate, open loop over {args.connections} keep-alive connections; "
        f"gunicorn 2 workers (gunicorn.conf.py threads); provider at 0 ms; "
        f"receipts worker --loop, RECEIPTS_SEND_RATE=0",
        flush=True,
    )
    figures = LatencyFigures()
    for rate in args.rates:
        result = run_rate(server_url, rate, args)
        figures.rates.append(result)
        print(result.line(), flush=True)
    print(f"knee (lowest rate with p99 > {KNEE_MS:g} ms): {figures.knee_text()}")
    at_goal = figures.at(GOAL_RATE)
    if at_goal is not None:
        verdict = "met" if at_goal.p99_ms <= GOAL_P99_MS else "MISSED"
        goal = f"goal <= {GOAL_P99_MS:g} ms: {verdict}"
        print(f"p99 at {GOAL_RATE}/s: {at_goal.p99_ms:.1f} ms ({goal})")
    print(CRON_NOTE)
    return figures


def run_rate(server_url: str, rate: int, args: argparse.Namespace) -> RateFigures:
    environ = {
        "STRIPE_WEBHOOK_SECRET": TEST_SECRET,
        "EMAIL_FROM": "Billing <billing@example.com>",
        "PGAPPNAME": WEB_APP,
    }
    with (
        throwaway_database(server_url, "receipts_bench_latency") as url,
        fake_provider(0.0) as provider_url,
        Gunicorn("wsgi:app", {**environ, "DATABASE_URL": url}, threads=None) as web,
        looping_worker(url, provider_url) as worker,
    ):
        target = urlsplit(web.url)
        warm_up(target.netloc, url)
        count = max(1, round(rate * args.seconds))
        invoice_ids = [f"in_1BLat{rate:03d}{n:07d}" for n in range(count)]
        events = sign_invoices(invoice_ids)
        web_pids = web.worker_pids()
        cpu_before = cpu_seconds(worker.pid), sum(cpu_seconds(pid) for pid in web_pids)
        box, own_cpu = BoxCpu(), time.process_time()
        with backlog_sampler(url) as samples, connection_peak(url) as connections:
            load = post_open_loop(target.netloc, invoice_ids, events, rate, args.connections)
            load_end, own_cpu = time.monotonic(), time.process_time() - own_cpu
            wait_for_backlog(url, args.grace)
        box_busy = box.busy()
        worker_cpu = cpu_seconds(worker.pid) - cpu_before[0]
        web_cpu = sum(cpu_seconds(pid) for pid in web_pids) - cpu_before[1]
        provider = FakeProviderClient(provider_url)
        received, stats = provider.received(), provider.stats()
        worker_peak = peak_rss_mb(worker.pid) or 0.0
        web_peak = web.worker_peak_rss_mb()
    first_received: dict[str, float] = {}
    for at, key in received:
        first_received.setdefault(key, at)
    latencies = []
    for invoice_id, answered_at in load.answered.items():
        arrived = first_received.get(f"platform/test/{invoice_id}/invoice-paid")
        latencies.append(math.inf if arrived is None else (arrived - answered_at) * 1000)
    delivered = sum(1 for value in latencies if not math.isinf(value))
    during_load = [(at, n) for at, n in samples if at <= load_end]
    return RateFigures(
        rate=rate,
        sent=count,
        answered=len(load.answered),
        delivered=delivered,
        latencies_ms=latencies,
        backlog_max=max((n for _, n in samples), default=0),
        backlog_end=during_load[-1][1] if during_load else 0,
        backlog_growth=growth(during_load),
        worker_cpu_ms_per_row=worker_cpu * 1000 / max(1, delivered),
        web_cpu_ms_per_request=web_cpu * 1000 / max(1, len(load.answered)),
        box_busy=box_busy,
        double_sends=sum(1 for n in stats["deliveries_by_key"].values() if n > 1),
        repeat_requests=sum(1 for n in stats["requests_by_key"].values() if n > 1),
        worker_peak_mb=worker_peak,
        web_peak_mb=web_peak,
        errors=load.errors,
        connections=connections,
        load_cpu_ms_per_event=own_cpu * 1000 / count,
    )


@contextlib.contextmanager
def looping_worker(url: str, provider_url: str) -> Iterator[subprocess.Popen[bytes]]:
    """``receipts worker --loop`` as a process, once it has logged that it started."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "DATABASE_URL": url,
        "RESEND_API_KEY": API_KEY,
        "RESEND_API_URL": provider_url,
        "RECEIPTS_SEND_RATE": "0",  # the worker's own speed, not Resend's
        "LOG_FORMAT": "json",
        "PGAPPNAME": WORKER_APP,
    }
    with tempfile.NamedTemporaryFile("w+b", suffix=".log") as log:
        process = subprocess.Popen(
            [str(BIN / "receipts"), "worker", "--loop"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            deadline = time.monotonic() + 30
            while b"worker started" not in Path(log.name).read_bytes():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"receipts worker did not start: {process.returncode}")
                time.sleep(0.05)
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def warm_up(netloc: str, url: str) -> None:
    """Some receipts through the whole path first: pools open, renderers built."""
    invoice_ids = [f"in_1BWarm{n:07d}" for n in range(60)]
    post_open_loop(netloc, invoice_ids, sign_invoices(invoice_ids), 60, 4)
    wait_for_backlog(url, 10.0)


@dataclass
class Load:
    answered: dict[str, float]  # invoice id -> wall-clock time its 200 arrived
    errors: int


def post_open_loop(
    netloc: str,
    invoice_ids: list[str],
    events: list[tuple[str, bytes]],
    rate: float,
    connections: int,
) -> Load:
    """Post event i at start + i / rate; thread k sends events k, k + connections, ..."""
    start = time.monotonic() + 0.1
    answered: dict[str, float] = {}
    errors: Counter[str] = Counter()

    def sender(k: int) -> None:
        conn = http.client.HTTPConnection(netloc, timeout=30)
        for i in range(k, len(events), connections):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            signature, body = events[i]
            headers = {"Stripe-Signature": signature, "Content-Type": "application/json"}
            try:
                conn.request("POST", "/webhooks/stripe", body, headers)
                response = conn.getresponse()
                response.read()
            except (OSError, http.client.HTTPException):
                errors["failed"] += 1
                conn.close()
                conn = http.client.HTTPConnection(netloc, timeout=30)
                continue
            if response.status == 200:
                answered[invoice_ids[i]] = time.time()
            else:
                errors[str(response.status)] += 1
        conn.close()

    threads = [threading.Thread(target=sender, args=(k,)) for k in range(connections)]
    # A thread whose answer has arrived waits for the GIL up to the switch interval
    # (5 ms by default) before it can note the time: hand the GIL over sooner.
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch_interval)
    return Load(answered=answered, errors=sum(errors.values()))


@contextlib.contextmanager
def backlog_sampler(url: str) -> Iterator[list[tuple[float, int]]]:
    """(monotonic time, rows pending or in flight) every 0.5 s while the block runs."""
    samples: list[tuple[float, int]] = []
    done = threading.Event()

    def sample() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            while not done.is_set():
                row = conn.execute(BACKLOG_SQL).fetchone()
                samples.append((time.monotonic(), row[0] if row else 0))
                done.wait(0.5)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        done.set()
        thread.join()


def wait_for_backlog(url: str, grace: float) -> None:
    """Until no row is pending or in flight, or ``grace`` seconds have passed."""
    deadline = time.monotonic() + grace
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(BACKLOG_SQL).fetchone()
            if row is not None and row[0] == 0:
                return
            time.sleep(0.1)


def growth(samples: list[tuple[float, int]]) -> float:
    """Rows per second the backlog grew by over the samples (least squares)."""
    if len(samples) < 3 or len({at for at, _ in samples}) < 2:
        return 0.0
    slope, _ = statistics.linear_regression([at for at, _ in samples], [n for _, n in samples])
    return slope


if __name__ == "__main__":
    sys.exit(main())
