"""Every test runs in folders of its own (tests/conftest.py, ``_own_folders``)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from receipts.dev.state import find_running

VARIABLES = ("TMPDIR", "HOME", "XDG_RUNTIME_DIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")


def own_folder() -> Path:
    return Path.cwd().parent


def test_the_working_folder_temp_home_and_xdg_folders_are_the_tests_own() -> None:
    """The working folder is empty and private; the temp directory Python uses
    and every variable a program reads to find per-user state point into it."""
    own = own_folder()
    assert list(Path.cwd().iterdir()) == []
    assert Path(tempfile.gettempdir()).is_relative_to(own)
    for name in VARIABLES:
        assert Path(os.environ[name]).is_relative_to(own), name
    assert Path.home().is_relative_to(own)


def test_a_process_started_by_a_test_inherits_them() -> None:
    """A child process sees the same temp directory and home, and finds no dev server."""
    child = subprocess.run(
        [sys.executable, "-c", "import os, tempfile; print(tempfile.gettempdir(), os.getcwd())"],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    temp, cwd = child.stdout.split()
    assert Path(temp).is_relative_to(own_folder()) and Path(cwd) == Path.cwd()
    assert find_running({}) is None and find_running(dict(os.environ)) is None


def test_no_two_tests_share_a_folder(tmp_path: Path) -> None:
    """The parent of this test's folders holds one folder per test so far, and this
    one is new: written by this test only."""
    marker = own_folder() / "tmp" / "written-by-this-test"
    assert not marker.exists()
    marker.write_text("mine")
