"""Scale-out: 1, 2 and 4 ``receipts worker`` processes draining one table, no double send.

Run by hand (not part of the tests)::

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python -m bench.scaleout [--rows 3000] [--processes 1 2 4] [--latency 0.05]

For each process count: a throwaway database with ``--rows`` pending rows
(as bench/drain.py fills them), the fake provider in a process of its own
answering after ``--latency`` seconds, and that many ``receipts worker``
processes (drain mode, default concurrency, ``RECEIPTS_SEND_RATE=0``)
started together on the same table. Rows per second is measured at the
provider, from the first send it received to the last (interpreter start-up
not counted). Prints it with the ratio to one process, the worker processes'
CPU per row, how busy the whole machine was, how the rows were shared, and
double sends: keys the provider accepted more than once, and keys requested
more than once (every key must be sent exactly once).
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
from dataclasses import dataclass, field

import psycopg

from bench.common import (
    ROOT,
    BoxCpu,
    connection_peak,
    measure_alone,
    ratio,
    server_url_or_exit,
    throwaway_database,
)
from bench.drain import API_KEY, fake_provider, fill
from tests.fake_provider import FakeProviderClient

# A doubling of processes "grows" throughput when it adds at least this much,
# unless the machine's cores were already this busy (then the cores are the limit).
GROWTH = 1.5
CORES_BUSY = 0.9


@dataclass(frozen=True)
class ScaleRun:
    processes: int
    rows: int
    delivered: int  # distinct keys the provider accepted
    span: float  # seconds from the first send received to the last
    cpu_seconds: float  # all worker processes, start-up included
    box_busy: float
    sent_by_process: list[int]
    double_sends: int  # keys accepted more than once
    repeat_requests: int  # keys requested more than once
    sent_rows: int  # rows the database holds as sent
    connections: int  # the most database connections the workers held at once

    @property
    def rate(self) -> float:
        return self.delivered / self.span if self.span else 0.0

    def line(self, single: ScaleRun | None) -> str:
        versus = f" = {ratio(self.rate, single.rate)} one process" if single else ""
        return (
            f"{self.processes} process(es): {self.delivered} rows in {self.span:.2f} s = "
            f"{self.rate:.0f} rows/s{versus}; CPU {self.cpu_seconds * 1000 / max(1, self.rows):.2f}"
            f" ms/row; machine busy {self.box_busy:.0%}; sent per process {self.sent_by_process}; "
            f"double sends {self.double_sends}, keys requested twice {self.repeat_requests}, "
            f"rows sent in the database {self.sent_rows}/{self.rows}; database connections "
            f"at most {self.connections} ({self.connections / self.processes:.1f} per process)"
        )


@dataclass
class ScaleFigures:
    runs: list[ScaleRun] = field(default_factory=list)

    @property
    def double_sends(self) -> int:
        return sum(run.double_sends + run.repeat_requests for run in self.runs)

    def grows(self) -> bool:
        """Each step up adds GROWTH x its share, or the machine was already CORES_BUSY."""
        ordered = sorted(self.runs, key=lambda run: run.processes)
        for fewer, more in itertools.pairwise(ordered):
            expected = fewer.rate * (1 + (GROWTH - 1) * (more.processes / fewer.processes - 1))
            if more.rate < expected and more.box_busy < CORES_BUSY:
                return False
        return len(ordered) > 1

    def summary(self) -> str:
        single = next((run for run in self.runs if run.processes == 1), None)
        if single is None:
            return ", ".join(f"{run.processes}p {run.rate:.0f}/s" for run in self.runs)
        return ", ".join(
            f"{run.processes}p {run.rate:.0f}/s = {ratio(run.rate, single.rate)} "
            f"(busy {run.box_busy:.0%})"
            for run in self.runs
        )


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--latency", type=float, default=0.05)
    return parser


def main() -> int:
    figures = measure_alone(parser, measure)
    return 0 if figures.double_sends == 0 else 1


def measure(args: argparse.Namespace) -> ScaleFigures:
    server_url = server_url_or_exit()
    print(
        f"rows={args.rows}, provider latency {args.latency * 1000:.0f} ms, receipts worker "
        "(drain mode, default concurrency, RECEIPTS_SEND_RATE=0)",
        flush=True,
    )
    figures = ScaleFigures()
    for processes in args.processes:
        run = drain_with(server_url, processes, args.rows, args.latency)
        figures.runs.append(run)
        single = next((r for r in figures.runs if r.processes == 1 and r is not run), None)
        print(run.line(single), flush=True)
    verdict = "met" if figures.grows() else "MISSED"
    print(
        f"throughput grows with processes until the cores are the limit: {verdict}; "
        f"double sends: {figures.double_sends} (goal 0)"
    )
    return figures


def drain_with(server_url: str, processes: int, rows: int, latency: float) -> ScaleRun:
    with (
        throwaway_database(server_url, "receipts_bench_scaleout") as url,
        fake_provider(latency) as provider_url,
    ):
        fill(url, rows)
        env = {
            "PATH": os.environ.get("PATH", ""),
            "DATABASE_URL": url,
            "RESEND_API_KEY": API_KEY,
            "RESEND_API_URL": provider_url,
            "RECEIPTS_SEND_RATE": "0",  # the workers' own ceiling, not Resend's
            "LOG_FORMAT": "json",
        }
        box = BoxCpu()
        with connection_peak(url) as connections:
            sent_by_process, cpu = run_workers(processes, env)
        busy = box.busy()
        provider = FakeProviderClient(provider_url)
        received, stats = provider.received(), provider.stats()
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT count(*) FROM email_outbox WHERE status = 'sent'").fetchone()
    times = [at for at, _ in received]
    return ScaleRun(
        processes=processes,
        rows=rows,
        delivered=len(stats["deliveries_by_key"]),
        span=max(times) - min(times) if times else 0.0,
        cpu_seconds=cpu,
        box_busy=busy,
        sent_by_process=sent_by_process,
        double_sends=sum(1 for n in stats["deliveries_by_key"].values() if n > 1),
        repeat_requests=sum(1 for n in stats["requests_by_key"].values() if n > 1),
        sent_rows=row[0] if row else 0,
        connections=connections["total"],
    )


def run_workers(processes: int, env: dict[str, str]) -> tuple[list[int], float]:
    """Start ``processes`` drain runs together, wait for all: (rows each sent, CPU seconds)."""
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "receipts.cli", "worker"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for _ in range(processes)
    ]
    sent_by_process, cpu = [], 0.0
    for worker in workers:
        sent, used = finish(worker)
        sent_by_process.append(sent)
        cpu += used
    return sent_by_process, cpu


def finish(worker: subprocess.Popen[str]) -> tuple[int, float]:
    """Wait for a drain run: (rows it sent, its user + system CPU seconds)."""
    assert worker.stdout is not None
    output = worker.stdout.read()
    _, status, usage = os.wait4(worker.pid, 0)
    worker.returncode = os.waitstatus_to_exitcode(status)
    if worker.returncode != 0:
        raise RuntimeError(f"receipts worker exited {worker.returncode}: {output}")
    summary = output.strip().splitlines()[-1].split(": ", 1)[-1]
    fields = dict(part.split("=", 1) for part in summary.split() if "=" in part)
    return int(fields["sent"]), usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    sys.exit(main())
