"""Real processes for the fault lab: gunicorn on a free port, a cuttable database path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psutil
import pytest
import requests

from tests.fake_provider import FakeProviderClient, running_fake_provider
from tests.helpers import free_port
from tests.stripe_events import TEST_SECRET
from tests.tcp_proxy import TcpProxy

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def through_proxy(database_url: str, proxy: TcpProxy) -> str:
    """The same database, reached through ``proxy`` without TLS (so bytes are readable)."""
    parts = urlsplit(database_url)
    credentials = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    query = "&".join(filter(None, (parts.query, "sslmode=disable")))
    netloc = f"{credentials}127.0.0.1:{proxy.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def proxy_to(database_url: str) -> TcpProxy:
    parts = urlsplit(database_url)
    return TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)


@pytest.fixture
def db_proxy(database_url: str) -> Iterator[TcpProxy]:
    """A proxy in front of this test's database; the test may cut it at any moment."""
    proxy = proxy_to(database_url)
    yield proxy
    proxy.close()


@dataclass
class Gunicorn:
    """``gunicorn wsgi:app`` as deployed (Procfile settings), on a free local port."""

    environ: Mapping[str, str]
    workers: int = 2
    threads: int = 4
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Gunicorn:
        command = [
            str(BIN / "gunicorn"),
            "wsgi:app",
            "--bind",
            f"127.0.0.1:{self.port}",
            "--workers",
            str(self.workers),
            "--threads",
            str(self.threads),
            "--graceful-timeout",
            "1",
        ]
        env = {**os.environ, **self.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.wait_until_serving()
        return self

    def wait_until_serving(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None and self.process.poll() is None, "gunicorn exited"
            try:
                answer = requests.get(self.url + "/healthz", timeout=2).status_code
                if answer == 200 and len(self.worker_pids()) == self.workers:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise TimeoutError("gunicorn did not start serving")

    def worker_pids(self) -> list[int]:
        assert self.process is not None
        try:
            return [child.pid for child in psutil.Process(self.process.pid).children()]
        except psutil.NoSuchProcess:
            return []

    def kill_workers(self) -> list[int]:
        """SIGKILL every worker at once (the master stays and starts new ones)."""
        pids = self.worker_pids()
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        return pids

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # gunicorn's quick shutdown
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def web_environ(database_url: str, **extra: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "STRIPE_WEBHOOK_SECRET": TEST_SECRET,
        "EMAIL_FROM": "Billing <billing@example.com>",
        "RECEIPTS_DATABASE_TIMEOUT": "2",
        **extra,
    }


@pytest.fixture
def start_gunicorn() -> Iterator[type[Gunicorn]]:
    """Start ``Gunicorn(environ).start()`` instances; all are stopped after the test."""
    started: list[Gunicorn] = []

    class Tracked(Gunicorn):
        def start(self) -> Gunicorn:
            started.append(self)
            return super().start()

    yield Tracked
    for server in started:
        server.stop()


PROVIDER_KEY = "re_fault_lab"


@pytest.fixture
def fake_provider() -> Iterator[FakeProviderClient]:
    """The fake Resend API: a real HTTP server on a free port (served from a thread)."""
    with running_fake_provider(api_key=PROVIDER_KEY) as provider:
        yield provider


def worker_environ(database_url: str, provider: FakeProviderClient, **extra: str) -> dict[str, str]:
    """A worker's environment: short timeouts and backoff so retries happen within a test."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "DATABASE_URL": database_url,
        "RESEND_API_KEY": PROVIDER_KEY,
        "RESEND_API_URL": provider.url,
        "RECEIPTS_PROVIDER_TIMEOUT": "2",
        "RECEIPTS_PROVIDER_CONNECT_TIMEOUT": "1",
        "RECEIPTS_RETRY_BASE_SECONDS": "0.2",
        "RECEIPTS_RETRY_MAX_SECONDS": "1",
        "RECEIPTS_DATABASE_TIMEOUT": "2",
        "RECEIPTS_SEND_RATE": "0",  # the faults, not the pace, are under test
        "LOG_FORMAT": "json",
        **extra,
    }


def start_worker(environ: Mapping[str, str], *args: str) -> subprocess.Popen[str]:
    """``receipts worker ARGS`` as a process of its own."""
    return subprocess.Popen(
        [sys.executable, "-m", "receipts.cli", "worker", *args],
        cwd=REPO,
        env=dict(environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err
