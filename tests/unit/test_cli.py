"""The ``receipts`` command line itself: help, bad command lines and errors that
need no database. Each subcommand's behaviour is tested with its own module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from receipts.cli import SUBCOMMANDS, main
from tests.real_processes import run_receipts_recording_modules

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_help_lists_every_command_without_importing_any(tmp_path: Path) -> None:
    """`receipts --help` names every subcommand with its one-line help, exits 0,
    and imports none of the subcommand modules (nor Flask) to do so."""
    result, modules = run_receipts_recording_modules(["--help"], {}, tmp_path / "modules.json")
    assert result.returncode == 0, result.stderr
    for name, (_, help_text) in SUBCOMMANDS.items():
        assert name in result.stdout
        assert help_text.split()[0] in result.stdout
    assert "receipts" in modules  # the record is of this very run
    assert [m for m in modules if m.startswith("receipts.commands.") or m == "flask"] == []


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_each_command_has_its_own_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`receipts <command> --help` shows that command's usage and options, exit 0."""
    with pytest.raises(SystemExit) as exited:
        main([name, "--help"], environ={})
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: receipts {name}")
    assert SUBCOMMANDS[name][1].split()[0] in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["sned"], "invalid choice: 'sned' (choose from 'migrate', 'worker'"),
        (["--verbose", "worker"], "unrecognized arguments: --verbose"),
    ],
    ids=["no-command", "unknown-command", "unknown-option"],
)
def test_a_bad_command_line_is_refused_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 with the usage line and what was wrong, before anything runs."""
    with pytest.raises(SystemExit) as exited:
        main(argv, environ={})
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: receipts") and message in err


@pytest.mark.parametrize(
    "args", [["--concurrency", "0"], ["--max-seconds", "soon"], ["--poll-seconds", "-1"]]
)
def test_bad_worker_options_are_refused_with_a_message(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused while parsing the command line, before anything connects or sends."""
    with pytest.raises(SystemExit) as exit_info:
        main(["worker", *args], environ={})
    assert exit_info.value.code == 2
    assert args[0] in capsys.readouterr().err


def test_prune_without_database_url_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    """No DATABASE_URL: a configuration error naming the variable, exit 2."""
    assert main(["prune"], {}) == 2
    assert "DATABASE_URL" in capsys.readouterr().err


def test_database_down_exits_3(capsys: Any) -> None:
    """An unreachable database is its own exit code, with one line on stderr."""
    environ = {"DATABASE_URL": "postgresql://postgres@127.0.0.1:1/none"}
    assert main(["status"], environ) == 3
    assert "database unavailable" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args", [["--help"], ["preview", str(EXAMPLES / "invoice_paid.json")]], ids=["help", "preview"]
)
def test_a_reader_that_went_away_ends_the_command_without_a_traceback(
    args: list[str], tmp_path: Path
) -> None:
    """`receipts … | head -1`: the pipe's reader is gone before the first write, as when
    head has read its line; the command stops quietly, nothing on standard error."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "receipts.cli", *args],
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
            cwd=tmp_path,
            timeout=60,
            check=False,
        )
    finally:
        os.close(writer)
    assert result.stderr == ""
    assert result.returncode == 1
