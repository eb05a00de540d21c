"""Real processes for tests, started as they are deployed.

``gunicorn wsgi:app`` with the Procfile's settings on a free port, and
``receipts worker`` as a process of its own, each with the environment a
test gives it (short timeouts and backoff, so retries happen within a test).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psutil
import requests

from tests.fake_provider import FakeProviderClient
from tests.helpers import free_port
from tests.stripe_events import TEST_SECRET

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PROVIDER_KEY = "re_fault_lab"


@dataclass
class Gunicorn:
    """``gunicorn wsgi:app`` as deployed (Procfile settings, ``gunicorn.conf.py``), on a
    free local port; ``threads=None`` keeps the shipped thread count."""

    environ: Mapping[str, str]
    workers: int = 2
    threads: int | None = 4  # None: the shipped gunicorn.conf.py's threads
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
            *(["--threads", str(self.threads)] if self.threads is not None else []),
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


# Where each started worker writes its output: files, not pipes. A looping
# worker may log more than a pipe holds (64 KiB) while its test is busy
# elsewhere, and a full pipe blocks its next log line, and with it every thread
# that logs: the worker would look stuck to the test that is watching it.
_OUTPUT_FILES: weakref.WeakKeyDictionary[subprocess.Popen[str], tuple[IO[str], IO[str]]] = (
    weakref.WeakKeyDictionary()
)


def start_worker(environ: Mapping[str, str], *args: str) -> subprocess.Popen[str]:
    """``receipts worker ARGS`` as a process of its own; :func:`finish` gives its output."""
    # The files outlive this call: finish() reads and closes them.
    out = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115
    err = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115
    process = subprocess.Popen(
        [sys.executable, "-m", "receipts.cli", "worker", *args],
        env=dict(environ),
        stdout=out,
        stderr=err,
        text=True,
    )
    _OUTPUT_FILES[process] = (out, err)
    return process


def finish(process: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    """Wait for ``process`` to end: its exit code, standard output and standard error."""
    files = _OUTPUT_FILES.pop(process, None)
    if files is None:
        out, err = process.communicate(timeout=timeout)
        return process.returncode, out, err
    code = process.wait(timeout=timeout)
    texts = []
    for file in files:
        with file:
            file.seek(0)
            texts.append(file.read())
    return code, texts[0], texts[1]


# `python -m receipts.cli ARGS`, with an exit hook that writes down every module
# the process imported. argv: [-c, MODULES_FILE, ARGS...]
_RUN_AND_RECORD_MODULES = """
import atexit, json, runpy, sys
modules_file = sys.argv.pop(1)
atexit.register(lambda: open(modules_file, "w").write(json.dumps(sorted(sys.modules))))
sys.argv[0] = "receipts"
runpy.run_module("receipts.cli", run_name="__main__", alter_sys=True)
"""


def run_receipts_recording_modules(
    args: list[str], environ: Mapping[str, str], modules_file: Path
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ``receipts ARGS`` in a process of its own; its result and the sorted
    names of every module it imported, recorded as it exited."""
    result = subprocess.run(
        [sys.executable, "-c", _RUN_AND_RECORD_MODULES, str(modules_file), *args],
        env=dict(environ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    modules: list[str] = json.loads(modules_file.read_text())
    return result, modules
