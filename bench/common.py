"""Shared parts of the benchmarks: throwaway databases, gunicorn, wrk, peak memory."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import psycopg
import requests

from receipts.dev.embedded import with_database
from receipts.migrations import migrate
from tests.fake_provider import FakeProviderClient
from tests.helpers import free_port
from tests.stripe_events import TEST_SECRET, event, invoice, sign

T = TypeVar("T")
ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
WRK_SCRIPT = Path(__file__).resolve().parent / "post_events.lua"


def measure_alone(
    parser: Callable[[], argparse.ArgumentParser], measure: Callable[[argparse.Namespace], T]
) -> T:
    """``python -m bench.NAME``: read its options, print the machine, run it once."""
    args = parser().parse_args()
    print(f"machine: {machine()}")
    return measure(args)


def server_url_or_exit() -> str:
    url = os.environ.get("DATABASE_URL")
    if not url:
        print("set DATABASE_URL to a PostgreSQL server (a throwaway database is made)", flush=True)
        raise SystemExit(2)
    return url


@contextlib.contextmanager
def throwaway_database(server_url: str, prefix: str = "receipts_bench") -> Iterator[str]:
    """A fresh migrated database, dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = with_database(server_url, name)
    try:
        migrate(url)
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Gunicorn:
    """One gunicorn serving ``app`` with the deployed settings (gunicorn.conf.py).

    ``threads`` None keeps the file's thread count (the deployed 64).
    """

    app: str
    environ: Mapping[str, str]
    workers: int = 2
    threads: int | None = 4
    process: subprocess.Popen[bytes] | None = None
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Gunicorn:
        self.port = free_port()
        self.process = subprocess.Popen(
            [
                str(BIN / "gunicorn"),
                "--config",
                str(ROOT / "gunicorn.conf.py"),
                "--bind",
                f"127.0.0.1:{self.port}",
                "--workers",
                str(self.workers),
                *(["--threads", str(self.threads)] if self.threads is not None else []),
                "--log-level",
                "warning",
                self.app,
            ],
            cwd=ROOT,
            env={**os.environ, **self.environ, "LOG_LEVEL": "warning"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(requests.RequestException):
                if requests.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return self
            time.sleep(0.1)
        raise TimeoutError(f"{self.app} did not start")

    def worker_pids(self) -> list[int]:
        assert self.process is not None
        return child_pids(self.process.pid)

    def worker_peak_rss_mb(self) -> list[float]:
        """Peak resident memory (VmHWM) of each worker process so far."""
        peaks = (peak_rss_mb(pid) for pid in self.worker_pids())
        return [peak for peak in peaks if peak is not None]

    def __exit__(self, *exc: object) -> None:
        """Stop gracefully (SIGTERM, as a platform does); a server or worker still there
        after 10 s is killed, so no process of one run goes on into the next.

        Not SIGINT: gunicorn's threaded worker shuts its thread pool down inside
        the signal handler, which deadlocks when the signal lands while the main
        thread is handing a request to that pool; the worker then never exits.
        """
        assert self.process is not None
        workers = child_pids(self.process.pid)
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def child_pids(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    found.append(int(entry.name))
    return found


def peak_rss_mb(pid: int) -> float | None:
    """The kernel's VmHWM of a running process, in MB; None once it has gone."""
    with contextlib.suppress(OSError):
        match = re.search(r"VmHWM:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
        if match:
            return int(match.group(1)) / 1024
    return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a running process so far (0 once it has gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # fields[0] is stat's 3rd field (state): utime and stime are its 14th and 15th.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class BoxCpu:
    """How busy all the machine's cores were between two readings of /proc/stat."""

    def __init__(self) -> None:
        self._start = self._read()

    @staticmethod
    def _read() -> tuple[int, int]:
        values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        idle = values[3] + values[4]  # idle + iowait
        return sum(values[:8]) - idle, sum(values[:8])

    def busy(self) -> float:
        """Fraction of all cores' time spent busy since this object was made."""
        busy, total = self._read()
        return (busy - self._start[0]) / max(1, total - self._start[1])


@contextlib.contextmanager
def connection_peak(url: str, every: float = 0.1) -> Iterator[dict[str, int]]:
    """The most connections to ``url``'s database seen at once while the block runs, per
    ``application_name`` (libpq takes it from PGAPPNAME) and in all under "total";
    the sampler's own is not counted."""
    peak: dict[str, int] = {"total": 0}
    done = threading.Event()

    def sample() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            while not done.is_set():
                rows = conn.execute(CONNECTIONS_SQL).fetchall()
                counts: dict[str, int] = {str(name): int(n) for name, n in rows}
                counts["total"] = sum(counts.values())
                for name, count in counts.items():
                    peak[name] = max(peak.get(name, 0), count)
                done.wait(every)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        done.set()
        thread.join()


CONNECTIONS_SQL = """SELECT application_name, count(*) FROM pg_stat_activity
                      WHERE datname = current_database() AND pid <> pg_backend_pid()
                      GROUP BY application_name"""


def signed_events(count: int, tag: str) -> list[tuple[str, bytes]]:
    """``count`` unique invoice.paid events, each with a fresh Stripe-Signature."""
    return sign_invoices([f"in_1B{tag}{n:07d}" for n in range(count)])


def sign_invoices(invoice_ids: list[str]) -> list[tuple[str, bytes]]:
    """One invoice.paid event per invoice id (event id derived from it), signed now."""
    bodies = []
    for invoice_id in invoice_ids:
        document = event(invoice(id=invoice_id), event_id="evt_" + invoice_id.removeprefix("in_"))
        body = json.dumps(document, indent=2).encode()
        bodies.append((sign(body, TEST_SECRET), body))
    return bodies


def write_wrk_data(events: list[tuple[str, bytes]]) -> Path:
    """Per event a line ``signature TAB length`` then the exact body bytes."""
    with tempfile.NamedTemporaryFile("wb", suffix=".events", delete=False) as handle:
        for signature, body in events:
            handle.write(f"{signature}\t{len(body)}\n".encode() + body)
    return Path(handle.name)


@dataclass(frozen=True)
class LoadResult:
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    requests: int
    non_2xx: int
    errors: int
    wrapped: bool

    def line(self) -> str:
        return (
            f"{self.requests_per_second:8.0f} req/s  p50 {self.p50_ms:6.2f} ms  "
            f"p99 {self.p99_ms:6.2f} ms  requests {self.requests}  non-2xx {self.non_2xx}  "
            f"socket errors {self.errors}{'  (events reused!)' if self.wrapped else ''}"
        )


def run_wrk(
    url: str, data: Path, *, connections: int, seconds: float, threads: int = 2
) -> LoadResult:
    """Post the pre-signed events in ``data`` with wrk; each event is sent once."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: apt-get install -y wrk")
    result = subprocess.run(
        [
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{seconds}s",
            "--latency",
            "--timeout",
            "10s",
            "-s",
            str(WRK_SCRIPT),
            url + "/webhooks/stripe",
            "--",
            str(data),
            str(threads),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return parse_wrk(result.stdout)


def parse_wrk(output: str) -> LoadResult:
    def latency_ms(percentile: str) -> float:
        match = re.search(rf"^\s+{percentile}%\s+([\d.]+)(us|ms|s)\s*$", output, re.M)
        if match is None:
            raise ValueError(f"no {percentile}% latency in wrk output:\n{output}")
        value, unit = float(match.group(1)), match.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    total = re.search(r"(\d+) requests in", output)
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    assert rate is not None and total is not None, output
    return LoadResult(
        requests_per_second=float(rate.group(1)),
        p50_ms=latency_ms("50"),
        p99_ms=latency_ms("99"),
        requests=int(total.group(1)),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        errors=sum(int(n) for n in errors.groups()) if errors else 0,
        wrapped="WRAPPED" in output,
    )


def machine_header() -> str:
    """nproc, CPU model and load averages: the line a whole run starts and ends with."""
    one, five, fifteen = os.getloadavg()
    return (
        f"nproc {os.cpu_count()}, CPU {cpu_model()}, "
        f"load average {one:.2f} {five:.2f} {fifteen:.2f} (1, 5, 15 min)"
    )


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def machine() -> str:
    cpu = cpu_model()
    memory = subprocess.run(["free", "-h"], capture_output=True, text=True).stdout.splitlines()
    total = memory[1].split()[1] if len(memory) > 1 else "?"
    return (
        f"{os.cpu_count()} CPUs ({cpu}), {total} RAM, Python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.2f}"
    )


def ratio(value: float, reference: float) -> str:
    return f"{value / reference:.2f}x" if reference else "n/a"


@contextlib.contextmanager
def fake_provider_process(
    api_key: str, *, rate_limit: int, latency: float = 0.0
) -> Iterator[FakeProviderClient]:
    """The fake Resend in a process of its own, enforcing ``rate_limit`` requests per
    second for the whole team, each new request taking ``latency`` seconds."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_provider", "--port", "0", "--latency", str(latency),
         "--api-key", api_key, "--rate-limit", str(rate_limit)],
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
