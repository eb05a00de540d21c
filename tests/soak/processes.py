"""The product's processes as they are deployed, and the fake provider.

gunicorn and the loop workers run the Procfile's own command lines (through
``sh``, which expands ``${RECEIPTS_WEB_DATABASE_URL:-$DATABASE_URL}`` and then
``exec``s, so the pid we hold is the process itself). Every process appends
its output to a log file of its own in the run's folder.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psutil
import requests

from tests.fake_provider import FakeProviderClient
from tests.helpers import free_port
from tests.real_processes import BIN, PROVIDER_KEY, REPO
from tests.stripe_events import TEST_SECRET

LEASE_SECONDS = 15  # the smallest the product accepts: drained leases expire soon
CRON_MAX_SECONDS = 20


def procfile_command(role: str) -> str:
    """The Procfile's command line for ``role`` (``web``, ``worker``)."""
    for line in (REPO / "Procfile").read_text().splitlines():
        name, _, command = line.partition(":")
        if name.strip() == role:
            return command.strip()
    raise LookupError(f"no {role!r} process in the Procfile")


def environment(database_url: str, provider_url: str) -> dict[str, str]:
    """What every receipts process gets: the proxied database, the fake provider,
    short leases, timeouts and backoff so that recovery happens within a soak."""
    return {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONUNBUFFERED": "1",
        "DATABASE_URL": database_url,
        "STRIPE_WEBHOOK_SECRET": TEST_SECRET,
        "EMAIL_FROM": "Billing <billing@example.com>",
        "RESEND_API_KEY": PROVIDER_KEY,
        "RESEND_API_URL": provider_url,
        "RECEIPTS_LEASE_SECONDS": str(LEASE_SECONDS),
        "RECEIPTS_PROVIDER_TIMEOUT": "3",
        "RECEIPTS_PROVIDER_CONNECT_TIMEOUT": "1",
        "RECEIPTS_RETRY_BASE_SECONDS": "0.5",
        "RECEIPTS_RETRY_MAX_SECONDS": "4",
        "RECEIPTS_DATABASE_TIMEOUT": "2",
        "RECEIPTS_SEND_RATE": "0",  # the faults, not the pace, are under test
        "LOG_FORMAT": "json",
    }


@dataclass
class Process:
    """One long-running process started from a shell command line, restartable."""

    name: str
    command: str
    environ: Mapping[str, str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0
    _log: IO[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        if self._log is None:
            self._log = self.log_path.open("ab")
        self._log.write(f"--- soak: start {self.starts + 1}: {self.command}\n".encode())
        self._log.flush()
        self.popen = subprocess.Popen(
            ["sh", "-c", f"exec env {self.command}"],
            cwd=REPO,
            env=dict(self.environ),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.starts += 1

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def exit_code(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def kill(self) -> list[int]:
        """SIGKILL the process and everything it started; return their pids."""
        if not self.running():
            return []
        try:
            tree = psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        pids = [self.pid, *(child.pid for child in tree)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert self.popen is not None
        self.popen.wait()
        psutil.wait_procs(tree, timeout=5)
        return pids

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int | None:
        """Ask the process to stop; SIGKILL it if it has not within ``timeout``."""
        if self.running():
            assert self.popen is not None
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        code = self.exit_code()
        if self._log is not None:
            self._log.close()
            self._log = None
        return code


class Web(Process):
    """gunicorn as the Procfile starts it, two workers, on a port of its own."""

    def __init__(self, environ: Mapping[str, str], log_path: Path) -> None:
        self.port = free_port()
        super().__init__(
            "web",
            procfile_command("web"),
            {
                **environ,
                "PORT": str(self.port),
                "WEB_CONCURRENCY": "2",
                # gunicorn.conf.py binds 0.0.0.0:$PORT; a soak listens on loopback only
                "GUNICORN_CMD_ARGS": f"--bind 127.0.0.1:{self.port}",
            },
            log_path,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def worker_pids(self) -> list[int]:
        try:
            return [child.pid for child in psutil.Process(self.pid).children()]
        except psutil.NoSuchProcess:
            return []

    def wait_until_serving(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise RuntimeError(f"gunicorn exited {self.exit_code()}: see {self.log_path}")
            try:
                if requests.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"gunicorn did not serve within {timeout} s: see {self.log_path}")


def loop_worker(number: int, environ: Mapping[str, str], log_dir: Path) -> Process:
    return Process(
        f"worker-{number}", procfile_command("worker"), environ, log_dir / f"worker-{number}.log"
    )


def cron_worker(environ: Mapping[str, str], log_dir: Path) -> Process:
    command = f"receipts worker --max-seconds {CRON_MAX_SECONDS}"
    return Process("cron", command, environ, log_dir / "cron.log")


class Provider:
    """``python -m tests.fake_provider`` in a process of its own."""

    def __init__(self, log_path: Path) -> None:
        self._log = log_path.open("ab")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "tests.fake_provider", "--port", "0", "--api-key", PROVIDER_KEY],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline().strip()
        if not line.startswith("listening on "):
            raise RuntimeError(f"the fake provider did not start: {line!r}")
        self.url = line.removeprefix("listening on ")
        self.client = FakeProviderClient(self.url)

    def stop(self) -> None:
        self.popen.terminate()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        self._log.close()
