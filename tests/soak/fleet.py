"""The product's processes during a soak: gunicorn, two loop workers, cron runs.

A supervisor thread keeps them as a platform would: a process the soak killed
comes back after the downtime the fault chose; one that exits on its own is
noted (the product should never need that) and restarted; a cron run starts
every few seconds, one at a time, as one-run-at-a-time cron does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from tests.soak.processes import Process, Web, cron_worker, loop_worker

CRON_EVERY_SECONDS = 5.0


class Fleet:
    def __init__(self, environ: Mapping[str, str], log_dir: Path) -> None:
        self.web = Web(environ, log_dir / "web.log")
        self.loop_workers = [loop_worker(n, environ, log_dir) for n in (1, 2)]
        self.cron = cron_worker(environ, log_dir)
        self.cron_exits = Counter[int]()  # exit code of every cron run that ended by itself
        self.unexpected_exits: list[tuple[str, int | None]] = []
        self._down_until: dict[str, float] = {}  # killed by a fault, back after this
        self._next_cron = 0.0
        self._cron_killed = False
        self._cron_enabled = True
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._supervise, name="fleet", daemon=True)

    def start(self) -> None:
        self.web.start()
        self.web.wait_until_serving()
        for worker in self.loop_workers:
            worker.start()
        self._thread.start()

    # --- faults -------------------------------------------------------------

    def kill(self, process: Process, down_for: float) -> list[int]:
        """SIGKILL ``process`` (and its children); the supervisor starts it again
        after ``down_for`` seconds."""
        with self._lock:
            if process is self.cron:
                self._cron_killed = True
            else:
                self._down_until[process.name] = time.monotonic() + down_for
            return process.kill()

    def kill_pid(self, pid: int) -> None:
        """SIGKILL one process the fleet does not supervise itself (a gunicorn worker)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    def all_up(self, timeout: float = 60.0) -> None:
        """Bring back every process a fault took down now, and wait until gunicorn serves."""
        with self._lock:
            self._down_until.clear()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.web.running() and all(w.running() for w in self.loop_workers):
                break
            time.sleep(0.2)
        self.web.wait_until_serving(timeout=max(1.0, deadline - time.monotonic()))

    def stop(self) -> dict[str, int | None]:
        """Stop every process the way a platform does (SIGTERM); their exit codes."""
        self._stopping.set()
        self._thread.join()
        codes = {w.name: w.stop() for w in self.loop_workers}
        codes["cron"] = self.cron.stop(timeout=40)
        codes["web"] = self.web.stop()
        return codes

    # --- supervision --------------------------------------------------------

    def _supervise(self) -> None:
        while not self._stopping.wait(0.2):
            with self._lock:
                for process in (self.web, *self.loop_workers):
                    self._keep_up(process)
                self._run_cron()

    def _keep_up(self, process: Process) -> None:
        if process.running():
            return
        down_until = self._down_until.get(process.name)
        if down_until is None:
            self.unexpected_exits.append((process.name, process.exit_code()))
        elif time.monotonic() < down_until:
            return
        self._down_until.pop(process.name, None)
        process.start()

    def _run_cron(self) -> None:
        if self.cron.running() or time.monotonic() < self._next_cron:
            return
        if self.cron.popen is not None and not self._cron_killed:
            code = self.cron.exit_code()
            if code is not None:
                self.cron_exits[code] += 1
        self._cron_killed = False
        self.cron.popen = None
        self.cron.start()
        self._next_cron = time.monotonic() + CRON_EVERY_SECONDS
