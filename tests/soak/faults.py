"""The fault schedule: at random moments (a seeded RNG), one fault at a time.

Each fault is a small method that does its damage, waits out its duration if
it has one, and undoes what is not a process coming back (the supervisor in
:mod:`.fleet` brings those back). Counts are kept by fault and by kind:
kills, restarts, partitions, provider faults.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable

from tests.soak.cluster import Cluster
from tests.soak.fleet import Fleet
from tests.soak.processes import Provider
from tests.tcp_proxy import TcpProxy

KINDS = ("kills", "restarts", "partitions", "provider faults")


class Faults:
    def __init__(
        self,
        rng: random.Random,
        cluster: Cluster,
        proxy: TcpProxy,
        provider: Provider,
        fleet: Fleet,
        say: Callable[[str], None],
    ) -> None:
        self._rng = rng
        self._cluster = cluster
        self._proxy = proxy
        self._provider = provider
        self._fleet = fleet
        self._say = say
        self.counts = Counter[str]()  # by fault name
        self.by_kind = Counter[str]()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faults", daemon=True)
        # name -> (kind, weight, the fault); a fault returns what it did, or None
        # when there was nothing to do (it is then not counted)
        self._menu: dict[str, tuple[str, int, Callable[[], str | None]]] = {
            "kill web workers": ("kills", 3, self._kill_web_workers),
            "kill gunicorn": ("kills", 2, self._kill_gunicorn),
            "kill loop worker": ("kills", 3, self._kill_loop_worker),
            "kill cron run": ("kills", 1, self._kill_cron_run),
            "restart postgres (fast)": ("restarts", 1, lambda: self._restart("fast")),
            "restart postgres (immediate)": ("restarts", 2, lambda: self._restart("immediate")),
            "reset database path": ("partitions", 2, self._reset_path),
            "blackhole database path": ("partitions", 2, self._blackhole),
            "hang new connections": ("partitions", 1, self._hang_new_connections),
            "slow provider": ("provider faults", 2, self._slow_provider),
            "provider 5xx": ("provider faults", 2, self._provider_5xx),
            "provider 429": ("provider faults", 2, self._provider_429),
        }

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Let the fault under way finish, then undo every lasting one."""
        self._stop.set()
        self._thread.join()
        self._proxy.stall(False)
        self._proxy.silence(False)
        self._proxy.refuse(False)
        self._provider.client.configure(latency=0)
        self._provider.client.clear_script()

    def _run(self) -> None:
        names = list(self._menu)
        weights = [self._menu[name][1] for name in names]
        while not self._stop.wait(self._rng.uniform(2.0, 8.0)):
            [name] = self._rng.choices(names, weights)
            kind, _, fault = self._menu[name]
            try:
                detail = fault()
            except Exception as exc:  # a fault that failed is a soak problem: say so, go on
                self._say(f"fault {name!r} failed: {type(exc).__name__}: {exc}")
                continue
            if detail is not None:
                self.counts[name] += 1
                self.by_kind[kind] += 1
                self._say(f"fault: {name}: {detail}")

    # --- kills --------------------------------------------------------------

    def _kill_web_workers(self) -> str | None:
        pids = self._fleet.web.worker_pids()
        if not pids:
            return None
        victims = pids if self._rng.random() < 0.5 else pids[:1]
        for pid in victims:
            self._fleet.kill_pid(pid)
        return f"SIGKILL {victims} (the master starts new ones)"

    def _kill_gunicorn(self) -> str | None:
        down = self._rng.uniform(0, 3)
        pids = self._fleet.kill(self._fleet.web, down)
        if not pids:
            return None
        return f"SIGKILL master and workers {pids}, back in {down:.1f} s"

    def _kill_loop_worker(self) -> str | None:
        running = [worker for worker in self._fleet.loop_workers if worker.running()]
        if not running:
            return None
        worker = self._rng.choice(running)
        down = self._rng.uniform(0, 5)
        pids = self._fleet.kill(worker, down)
        return f"SIGKILL {worker.name} {pids}, back in {down:.1f} s"

    def _kill_cron_run(self) -> str | None:
        pids = self._fleet.kill(self._fleet.cron, 0)
        return f"SIGKILL {pids}" if pids else None

    # --- the database -------------------------------------------------------

    def _restart(self, mode: str) -> str:
        assert mode in ("fast", "immediate")
        down = self._cluster.restart("fast" if mode == "fast" else "immediate")
        return f"down {down:.1f} s"

    def _reset_path(self) -> str:
        refuse_for = self._rng.choice([0.0, self._rng.uniform(0.5, 3)])
        self._proxy.refuse(True)
        cut = self._proxy.cut()
        self._stop.wait(refuse_for)
        self._proxy.refuse(False)
        return f"{cut} connections reset, new ones refused for {refuse_for:.1f} s"

    def _blackhole(self) -> str:
        """Bytes taken and never forwarded, new connections never answered (a hung
        server or a middlebox that still ACKs); then everything is reset."""
        seconds = self._rng.uniform(2, 10)
        self._proxy.stall(True)
        self._proxy.silence(True)
        time.sleep(seconds)
        cut = self._proxy.cut()
        self._proxy.silence(False)
        self._proxy.stall(False)
        return f"{seconds:.1f} s, then {cut} connections reset"

    def _hang_new_connections(self) -> str:
        seconds = self._rng.uniform(2, 6)
        self._proxy.silence(True)
        time.sleep(seconds)
        self._proxy.silence(False)
        return f"{seconds:.1f} s"

    # --- the provider -------------------------------------------------------

    def _slow_provider(self) -> str:
        latency = self._rng.uniform(0.5, 5)  # past RECEIPTS_PROVIDER_TIMEOUT (3 s) at times
        seconds = self._rng.uniform(3, 12)
        self._provider.client.configure(latency=latency)
        time.sleep(seconds)
        self._provider.client.configure(latency=0)
        return f"{latency:.1f} s per request for {seconds:.1f} s"

    def _provider_5xx(self) -> str:
        statuses = [self._rng.choice([500, 502, 503]) for _ in range(self._rng.randint(1, 6))]
        self._provider.client.script(
            *({"status": s, "name": "internal_server_error" if s == 500 else None}
              for s in statuses)
        )  # fmt: skip
        return f"next answers {statuses}"

    def _provider_429(self) -> str:
        count = self._rng.randint(1, 4)
        retry_after = self._rng.randint(1, 3)
        answer = {
            "status": 429,
            "name": "rate_limit_exceeded",
            "headers": {"Retry-After": str(retry_after)},
        }
        self._provider.client.script(*([answer] * count))
        return f"next {count} answers 429, Retry-After {retry_after}"
