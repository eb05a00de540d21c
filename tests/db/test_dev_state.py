"""A running ``receipts dev`` is found by the other commands: its database, its port, its secret.

The dev server is stood in for by this test process: its state folder names
this process as running (``dev.json``), a real database and a real web app.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from werkzeug.serving import make_server

from receipts.cli import main
from receipts.config import load_settings
from receipts.dev.state import (
    DEV_EMAIL_FROM,
    ensure_dev_secret,
    find_running,
    forget_running,
    record_running,
    with_dev_database,
)
from receipts.web import create_app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


@pytest.fixture
def dev_server(database_url: str, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A state folder recorded as served by this process, its secret, and a real web app
    on a random port verifying that secret; yields (folder, webhook URL)."""
    folder = tmp_path / "state"
    secret, _ = ensure_dev_secret(folder)
    app = create_app(
        load_settings(
            {"DATABASE_URL": database_url, "STRIPE_WEBHOOK_SECRET": secret,
             "EMAIL_FROM": "billing@example.com"}
        )
    )  # fmt: skip
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}/webhooks/stripe"
    defaults = {"EMAIL_FROM": DEV_EMAIL_FROM, "RECEIPTS_MAIL_DIR": str(folder / "mail")}
    record_running(
        folder, database_url=database_url, webhook_url=url, defaults=defaults, environ={}
    )
    try:
        yield folder, url
    finally:
        forget_running(folder, {})
        server.shutdown()
        app.extensions["receipts"].database.close()


def test_commands_use_the_dev_database_when_database_url_is_unset(
    dev_server: tuple[Path, str], capsys: Any
) -> None:
    """`receipts status` in a second terminal (no DATABASE_URL) reads the dev database
    and says on stderr where it found it."""
    folder, _ = dev_server
    assert main(["status"], {"RECEIPTS_DEV_DIR": str(folder)}) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("outbox ")
    assert f"using the database of `receipts dev` (pid {os.getpid()}, {folder / 'dev.json'})" in (
        captured.err
    )


def test_a_dev_folder_whose_server_is_stopped_names_database_url(
    dev_server: tuple[Path, str], capsys: Any
) -> None:
    """The folder is there but `receipts dev` is not running: one line saying so."""
    folder, _ = dev_server
    forget_running(folder, {})
    (folder / "database-id").write_text("abc\n")
    assert main(["status"], {"RECEIPTS_DEV_DIR": str(folder)}) == 2
    err = capsys.readouterr().err
    assert f"DATABASE_URL: is not set, and the `receipts dev` of {folder} is not running" in err


def test_a_configured_database_url_wins_over_the_dev_one(dev_server: tuple[Path, str]) -> None:
    folder, _ = dev_server
    environ = {"RECEIPTS_DEV_DIR": str(folder), "DATABASE_URL": "postgresql://elsewhere/db"}
    assert with_dev_database(environ) is environ


def test_replay_follows_the_running_dev_server_from_another_folder(
    dev_server: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """From a folder with no .receipts and no RECEIPTS_DEV_DIR, replay finds the most
    recently started dev server: its port and its secret. A redelivery is a duplicate."""
    folder, url = dev_server
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    found = find_running({})
    assert found is not None and (found.folder, found.webhook_url) == (folder, url)
    event = str(EXAMPLES / "invoice_paid.json")
    assert main(["replay", event, "--times", "3"], {}) == 0
    out = capsys.readouterr().out
    assert f"-> {url}, 3 delivery(ies):" in out
    assert "1 x 200 queued platform/test/in_1QExamplePaid00000001/invoice-paid" in out
    assert "2 x 200 duplicate platform/test/in_1QExamplePaid00000001/invoice-paid" in out


def test_a_dev_server_is_found_only_under_the_temp_folder_it_was_started_with(
    dev_server: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The note naming the most recently started dev server lives under TMPDIR of
    the command's environment: a command given another TMPDIR neither finds that
    dev server from another folder nor replaces the note."""
    folder, url = dev_server
    elsewhere, other_temp = tmp_path / "elsewhere", tmp_path / "other-temp"
    for made in (elsewhere, other_temp, tmp_path / "another-state"):
        made.mkdir()
    monkeypatch.chdir(elsewhere)
    assert find_running({"TMPDIR": str(other_temp)}) is None
    found = find_running({})
    assert found is not None and found.webhook_url == url
    record_running(
        tmp_path / "another-state",
        database_url="postgresql://elsewhere/db",
        webhook_url="http://127.0.0.1:1/webhooks/stripe",
        defaults={},
        environ={"TMPDIR": str(other_temp)},
    )
    (tmp_path / "another-state" / "dev.json").unlink()
    found = find_running({})
    assert found is not None and found.folder == folder
    assert [path.name for path in other_temp.iterdir()] == [f"receipts-dev-{os.getuid()}.json"]


def test_a_dead_dev_server_is_not_found(dev_server: tuple[Path, str]) -> None:
    """dev.json left by a killed dev server (its pid gone) is ignored."""
    folder, url = dev_server
    (folder / "dev.json").write_text(
        f'{{"pid": 999999999, "database_url": "x", "webhook_url": "{url}"}}'
    )
    assert find_running({"RECEIPTS_DEV_DIR": str(folder)}) is None


def test_doctor_checks_the_running_dev_set_up(dev_server: tuple[Path, str], capsys: Any) -> None:
    """Beside a running `receipts dev` and nothing configured, doctor checks what dev
    runs with (its database, sender, mail folder and secret): every check passes."""
    folder, _ = dev_server
    assert main(["doctor"], {"RECEIPTS_DEV_DIR": str(folder)}) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "ok webhook-secret: 1 Stripe signing secret(s)" in out
    assert f"ok resend-key: not used: mail goes to .eml files in {folder / 'mail'}" in out


def test_version(capsys: Any) -> None:
    """`receipts --version` prints the installed version and exits 0."""
    with pytest.raises(SystemExit) as exit_:
        main(["--version"], {})
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip().startswith("receipts 0.")


def test_a_second_dev_in_a_folder_a_live_dev_serves_is_refused_before_anything_starts(
    tmp_path: Path, capsys: Any
) -> None:
    """The folder's note names a live process (a child standing in for the first
    `receipts dev`): refused in one line naming it, and the note, the folder and
    everything else are left as they were. (tests/processes/test_dev.py runs the
    same with two real dev processes, in the slow tier.)"""
    import subprocess
    import sys

    from tests.helpers import free_port

    folder = tmp_path / "state"
    folder.mkdir()
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        note = json.dumps({"pid": first.pid, "database_url": "postgresql://x/y",
                           "webhook_url": "http://127.0.0.1:1/webhooks/stripe"})  # fmt: skip
        (folder / "dev.json").write_text(note)
        before = sorted(path.name for path in folder.iterdir())
        code = main(["dev", "--port", str(free_port())], {"RECEIPTS_DEV_DIR": str(folder)})
        assert code == 1
        assert capsys.readouterr().err == (
            f"receipts dev: another `receipts dev` (pid {first.pid}) already serves "
            f"{folder.resolve()}: stop it first, or give this one its own --state-dir\n"
        )
        assert (folder / "dev.json").read_text() == note
        assert sorted(path.name for path in folder.iterdir()) == before
    finally:
        first.kill()
        first.wait()
