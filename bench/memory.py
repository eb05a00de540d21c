"""Memory: peak RSS of a web worker under ingest load and of a worker process draining,
and what each top-level import costs on its own.

Run by hand (not part of the tests)::

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python -m bench.memory [--seconds 10] [--rows 5000]

It serves ``wsgi:app`` with the deployed settings (gunicorn.conf.py, 2
workers) and posts signed unique events with wrk at 16 connections for
``--seconds``, then reads each web worker's VmHWM; it drains ``--rows``
pending rows with ``receipts worker`` (fake provider at 0 ms) and samples the
worker's VmHWM until it exits. Then, for each module, a fresh interpreter
imports it alone and prints its resident memory before and after (VmRSS);
for ``wsgi`` that includes building the app, as a web worker does. Last, the
third-party distributions each process's entry point loads. Goal: at most
64 MB per web worker and per worker process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

from bench.common import (
    ROOT,
    Gunicorn,
    measure_alone,
    run_wrk,
    server_url_or_exit,
    signed_events,
    throwaway_database,
    write_wrk_data,
)
from bench.drain import API_KEY, fake_provider, fill, run_measured
from tests.stripe_events import TEST_SECRET

GOAL_MB = 64.0
# What each process runs: the web worker builds the app (wsgi), `receipts worker`
# imports the command line and then its subcommand's module.
ENTRY_POINTS = ["wsgi", "receipts.cli", "receipts.commands.worker"]
THIRD_PARTY = [
    "flask",
    "stripe",
    "psycopg",
    "psycopg_pool",
    "jinja2",
    "babel",
    "requests",
    "prometheus_client",
    "standardwebhooks",
]

# Runs in a fresh interpreter: resident memory before and after one import,
# and the third-party distributions that import loaded.
IMPORT_PROBE = """
import importlib, json, re, sys
from importlib import metadata

def rss_kb():
    with open("/proc/self/status") as status:
        return int(re.search(r"VmRSS:\\s+(\\d+) kB", status.read()).group(1))

before, loaded_before = rss_kb(), set(sys.modules)
importlib.import_module(sys.argv[1])
after = rss_kb()
tops = {name.split(".")[0] for name in set(sys.modules) - loaded_before}
owners = metadata.packages_distributions()
third = sorted({d for top in tops if top not in sys.stdlib_module_names
                for d in owners.get(top, []) if d != "receipts"})
print(json.dumps({"before_kb": before, "after_kb": after, "distributions": third}))
"""


@dataclass(frozen=True)
class ImportCost:
    module: str
    before_mb: float
    delta_mb: float
    distributions: list[str]


@dataclass
class MemoryFigures:
    web_started_mb: list[float] = field(default_factory=list)  # VmHWM once serving, before load
    web_peak_mb: list[float] = field(default_factory=list)
    worker_peak_mb: float = 0.0
    imports: list[ImportCost] = field(default_factory=list)

    @property
    def web_max_mb(self) -> float:
        return max(self.web_peak_mb, default=0.0)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10, help="ingest load on the web workers")
    parser.add_argument("--rows", type=int, default=5000, help="rows the worker drains")
    return parser


def main() -> int:
    measure_alone(parser, measure)
    return 0


def measure(args: argparse.Namespace) -> MemoryFigures:
    server_url = server_url_or_exit()
    figures = MemoryFigures()
    figures.web_started_mb, figures.web_peak_mb = web_peak(server_url, args.seconds)
    print(
        f"web worker peak RSS once started: {mb_list(figures.web_started_mb)}; "
        f"after {args.seconds} s of ingest (wrk, 16 connections): "
        f"{mb_list(figures.web_peak_mb)} (goal <= {GOAL_MB:g} MB: {verdict(figures.web_max_mb)})",
        flush=True,
    )
    figures.worker_peak_mb = worker_peak(server_url, args.rows)
    print(
        f"receipts worker peak RSS draining {args.rows} rows: {figures.worker_peak_mb:.1f} MB "
        f"(goal <= {GOAL_MB:g} MB: {verdict(figures.worker_peak_mb)})",
        flush=True,
    )
    print("each module imported alone in a fresh interpreter (VmRSS after - before):")
    for module in ENTRY_POINTS + THIRD_PARTY:
        cost = import_cost(module)
        figures.imports.append(cost)
        print(f"  {module:26} +{cost.delta_mb:5.1f} MB (interpreter {cost.before_mb:.1f} MB)")
    for cost in figures.imports:
        if cost.module in ENTRY_POINTS:
            print(f"  {cost.module} loads: {', '.join(cost.distributions) or 'nothing'}")
    return figures


def mb_list(values: list[float]) -> str:
    return ", ".join(f"{mb:.1f} MB" for mb in values) or "n/a"


def verdict(peak_mb: float) -> str:
    return "met" if 0 < peak_mb <= GOAL_MB else "MISSED"


def web_peak(server_url: str, seconds: int) -> tuple[list[float], list[float]]:
    """Each web worker's VmHWM once it serves (/healthz answered), then after the load."""
    with throwaway_database(server_url, "receipts_bench_memory") as url:
        environ = {
            "DATABASE_URL": url,
            "STRIPE_WEBHOOK_SECRET": TEST_SECRET,
            "EMAIL_FROM": "Billing <billing@example.com>",
        }
        with Gunicorn("wsgi:app", environ, threads=None) as server:
            started = server.worker_peak_rss_mb()
            events = signed_events(4000 * seconds, "mem")
            run_wrk(server.url, write_wrk_data(events), connections=16, seconds=seconds)
            return started, server.worker_peak_rss_mb()


def worker_peak(server_url: str, rows: int) -> float:
    with (
        throwaway_database(server_url, "receipts_bench_memory") as url,
        fake_provider(0.0) as provider_url,
    ):
        fill(url, rows)
        env = {
            "PATH": os.environ.get("PATH", ""),
            "DATABASE_URL": url,
            "RESEND_API_KEY": API_KEY,
            "RESEND_API_URL": provider_url,
            "RECEIPTS_SEND_RATE": "0",
            "LOG_FORMAT": "json",
        }
        return run_measured([sys.executable, "-m", "receipts.cli", "worker"], env).peak_rss_mb


def import_cost(module: str) -> ImportCost:
    with tempfile.TemporaryDirectory(prefix="receipts-metrics-") as metrics_dir:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(ROOT),
            # What wsgi needs to build the app; nothing connects at start-up.
            "DATABASE_URL": "postgresql://bench@127.0.0.1:1/bench",
            "STRIPE_WEBHOOK_SECRET": TEST_SECRET,
            "EMAIL_FROM": "Billing <billing@example.com>",
            "PROMETHEUS_MULTIPROC_DIR": metrics_dir,  # gunicorn.conf.py sets it for web workers
        }
        result = subprocess.run(
            [sys.executable, "-c", IMPORT_PROBE, module],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    found = json.loads(result.stdout.strip().splitlines()[-1])
    return ImportCost(
        module=module,
        before_mb=found["before_kb"] / 1024,
        delta_mb=(found["after_kb"] - found["before_kb"]) / 1024,
        distributions=found["distributions"],
    )


if __name__ == "__main__":
    sys.exit(main())
