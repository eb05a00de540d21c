"""``receipts dev``: the whole product on one machine, with nothing to set up.

Starts an embedded PostgreSQL when DATABASE_URL is unset, applies the
migrations, serves the webhook on 127.0.0.1 (``--port``, default 8000) and runs
the worker loop in the same process. Mail goes to ``.eml`` files in the dev
state folder unless RESEND_API_KEY is set (or another provider is chosen:
``--smtp HOST:PORT`` sends to a local SMTP catcher such as Mailpit). A
webhook secret is generated once per state folder (``receipts replay`` finds
it there) and accepted next to any configured STRIPE_WEBHOOK_SECRET. While it
runs, the folder's ``dev.json`` names its database and webhook URL:
``replay`` posts to that port, and the other commands use that database when
DATABASE_URL is unset. Ctrl-C or
SIGTERM stops the web server, the worker and the embedded database, and exits 0.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from receipts.config import Settings, SmtpTarget, load_settings
from receipts.delivery.configured import provider_from_settings
from receipts.delivery.summary import WorkerSummary
from receipts.delivery.worker import run_worker
from receipts.dev.embedded import EmbeddedStartFailed, EmbeddedUnavailable, start_server
from receipts.dev.state import (
    DEV_EMAIL_FROM,
    RUNNING_FILE,
    SECRET_FILE,
    dev_data_dir,
    ensure_dev_secret,
    forget_running,
    record_running,
    running_in,
    state_dir,
)
from receipts.logs import configure_logging, log_fields
from receipts.migrations import migrate
from receipts.web import create_app

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
WORKER_CONCURRENCY = 2
WORKER_POLL_SECONDS = 2.0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port", type=_port, default=8000, help="webhook port on 127.0.0.1 (default 8000)"
    )
    parser.add_argument(
        "--smtp",
        type=_smtp_address,
        metavar="HOST:PORT",
        help="send mail over plain SMTP to a local catcher such as Mailpit (127.0.0.1:1025)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="dev state folder: secret and mail (default: RECEIPTS_DEV_DIR or .receipts)",
    )


class _RequestLog(WSGIRequestHandler):
    """Access lines only for requests not answered 2xx; accepted webhooks log themselves."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if not str(code).startswith("2"):
            super().log_request(code, size)


@dataclass(frozen=True, kw_only=True)
class DevSetup:
    """The settings the dev process runs with, and what it chose on the user's behalf."""

    settings: Settings
    folder: Path
    database_note: str
    notes: tuple[str, ...]


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    configured = load_settings(environ)
    configure_logging(configured.log_format)
    folder = state_dir(configured, args.state_dir)
    serving = running_in(folder)
    if serving is not None:
        # A second server here would share the first one's database and secret,
        # and remove its note of itself on exit.
        print(f"receipts dev: another `receipts dev` (pid {serving}) already serves {folder}: "
              "stop it first, or give this one its own --state-dir", file=sys.stderr)  # fmt: skip
        return 1
    problem = _port_problem(args.port)
    if problem is not None:
        print(f"receipts dev: cannot listen on {HOST}:{args.port}: {problem}", file=sys.stderr)
        print("receipts dev: is another `receipts dev` running? Try --port.", file=sys.stderr)
        return 1
    stop = threading.Event()
    _stop_on_signals(stop)
    with ExitStack() as cleanup:
        if args.smtp is not None:
            configured = replace(configured, provider="smtp", smtp=args.smtp)
        try:
            setup = _prepare(configured, args.state_dir, cleanup)
        except (EmbeddedUnavailable, EmbeddedStartFailed) as exc:
            print(f"receipts dev: {exc}", file=sys.stderr)
            return 1
        app = create_app(setup.settings)
        cleanup.callback(app.extensions["receipts"].database.close)
        http = make_server(HOST, args.port, app, threaded=True, request_handler=_RequestLog)
        cleanup.callback(http.server_close)
        web = _start_thread("web", lambda: http.serve_forever(poll_interval=0.2))
        cleanup.callback(web.join)
        cleanup.callback(http.shutdown)
        worker_result: list[WorkerSummary | BaseException] = []
        worker = _start_thread("worker", lambda: _run_worker(setup.settings, stop, worker_result))
        cleanup.callback(worker.join)
        cleanup.callback(stop.set)
        assert setup.settings.database_url is not None
        record_running(
            setup.folder,
            database_url=setup.settings.database_url,
            webhook_url=f"http://{HOST}:{http.server_port}/webhooks/stripe",
            defaults=_chosen_defaults(setup.settings),
            environ=environ,
        )
        cleanup.callback(forget_running, setup.folder, environ)
        _print_banner(setup, http)
        while not stop.wait(0.5):
            if not worker.is_alive():
                break
    return _exit_code(stop, worker_result)


def _prepare(configured: Settings, state_override: Path | None, cleanup: ExitStack) -> DevSetup:
    """Database, migrations, secret, sender and mail folder, with a note for each default."""
    folder = state_dir(configured, state_override)
    folder.mkdir(parents=True, exist_ok=True)
    database_url = configured.database_url
    if database_url is None:
        data_dir = dev_data_dir(folder)
        log_fields(log, "starting embedded PostgreSQL", data_dir=data_dir)
        server = start_server(data_dir)
        cleanup.callback(log_fields, log, "embedded PostgreSQL stopped", data_dir=data_dir)
        cleanup.callback(server.cleanup)
        database_url = server.get_uri("postgres")
        database_note = f"embedded PostgreSQL {database_url} (data in {data_dir})"
    else:
        database_note = "DATABASE_URL"
    applied = migrate(database_url)
    log_fields(log, "database ready", migrations_applied=len(applied))
    dev_secret, created = ensure_dev_secret(folder)
    notes = [_secret_note(configured, folder, created)]
    email_from = configured.email_from
    if email_from is None:
        email_from = DEV_EMAIL_FROM
        notes.append(f"sender     {DEV_EMAIL_FROM} (EMAIL_FROM is not set)")
    if configured.stripe_api_key:
        notes.append(f"stripe api {configured.stripe_api_base} (thin events, receipt facts)")
    else:
        notes.append("stripe api none (STRIPE_API_KEY is not set: thin events wait for one)")
    mail_dir = configured.mail_dir or folder / "mail"
    notes.append(_mail_note(configured, mail_dir))
    settings = replace(
        configured,
        database_url=database_url,
        stripe_webhook_secrets=(*configured.stripe_webhook_secrets, dev_secret),
        email_from=email_from,
        mail_dir=mail_dir,
    )
    return DevSetup(
        settings=settings, folder=folder, database_note=database_note, notes=tuple(notes)
    )


def _mail_note(configured: Settings, mail_dir: Path) -> str:
    chosen = configured.chosen_provider
    if chosen == "smtp" and configured.smtp is not None:
        return f"mail       sent by SMTP to {configured.smtp.where()}"
    if chosen == "postmark":
        return f"mail       sent through Postmark at {configured.postmark_api_url}"
    if chosen == "resend":
        return f"mail       sent through Resend at {configured.resend_api_url}"
    return f"mail       .eml files in {mail_dir} (RESEND_API_KEY is not set)"


def _chosen_defaults(settings: Settings) -> dict[str, str]:
    """The settings dev chose on the user's behalf, for `receipts doctor` to check the same."""
    chosen = {"EMAIL_FROM": settings.email_from or DEV_EMAIL_FROM}
    if settings.chosen_provider == "smtp" and settings.smtp is not None:
        chosen["RECEIPTS_PROVIDER"] = "smtp"
        chosen["SMTP_URL"] = f"smtp://{settings.smtp.netloc}"
    elif settings.mail_dir is not None and settings.chosen_provider in (None, "file"):
        chosen["RECEIPTS_MAIL_DIR"] = str(settings.mail_dir)
    return chosen


def _secret_note(configured: Settings, folder: Path, created: bool) -> str:
    where = folder / SECRET_FILE
    if configured.stripe_webhook_secrets:
        return f"secret     STRIPE_WEBHOOK_SECRET, and the local dev secret in {where}"
    made = "generated a local webhook secret" if created else "local webhook secret"
    return f"secret     {made} in {where} (receipts replay uses it)"


def _run_worker(
    settings: Settings, stop: threading.Event, result: list[WorkerSummary | BaseException]
) -> None:
    try:
        provider = provider_from_settings(settings, concurrency=WORKER_CONCURRENCY)
        try:
            summary = run_worker(
                settings,
                provider,
                loop=True,
                stop_event=stop,
                concurrency=WORKER_CONCURRENCY,
                poll_seconds=WORKER_POLL_SECONDS,
            )
        finally:
            provider.close()
    except Exception as exc:
        result.append(exc)
        log_fields(log, "worker stopped", logging.ERROR, error=str(exc) or type(exc).__name__)
    else:
        result.append(summary)


def _exit_code(stop: threading.Event, worker_result: list[WorkerSummary | BaseException]) -> int:
    outcome = worker_result[0] if worker_result else None
    if isinstance(outcome, WorkerSummary) and outcome.error is not None:
        print(f"receipts dev: the worker stopped: {outcome.error}", file=sys.stderr)
        return outcome.exit_code or 1
    if isinstance(outcome, BaseException):
        print(f"receipts dev: the worker failed: {outcome}", file=sys.stderr)
        return 1
    print("receipts dev: stopped", flush=True)
    return 0


def _print_banner(setup: DevSetup, http: BaseWSGIServer) -> None:
    port = http.server_port
    lines = [
        "",
        f"receipts dev: ready on http://{HOST}:{port}",
        f"  database   {setup.database_note}",
        f"  webhook    POST http://{HOST}:{port}/webhooks/stripe",
        *(f"  {note}" for note in setup.notes),
        "",
        "  Forward Stripe test events (Stripe CLI, after `stripe login`):",
        f"    stripe listen --events invoice.paid --forward-to localhost:{port}/webhooks/stripe",
        "    stripe trigger invoice.paid --override customer:email=you@example.com",
        "    (start receipts dev with STRIPE_WEBHOOK_SECRET=$(stripe listen --print-secret)",
        "     so their signatures verify; thin events also need STRIPE_API_KEY)",
        "  Replay a saved event from another terminal (it finds this server's port):",
        f"    {_invoked_as()} replay examples/invoice_paid.json",
        "  Inspect what happened from another terminal (commands find this database in",
        f"  {setup.folder / RUNNING_FILE} while DATABASE_URL is unset):",
        f"    {_invoked_as()} status",
        f"    {_invoked_as()} show INVOICE_NUMBER|EMAIL|in_…",
        "  Ctrl-C stops everything, the database included.",
        "",
    ]
    print("\n".join(lines), flush=True)


def _port_problem(port: int) -> str | None:
    """Why the port cannot be served, checked before the database starts."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def _invoked_as() -> str:
    """``receipts``, or the path it was run by (``.venv/bin/receipts``) so the hint runs as is."""
    invoked = sys.argv[0] if sys.argv else ""
    return invoked if Path(invoked).name == "receipts" else "receipts"


def _start_thread(name: str, target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, name=f"receipts-dev-{name}", daemon=True)
    thread.start()
    return thread


def _stop_on_signals(stop: threading.Event) -> None:
    """First Ctrl-C/SIGTERM: stop cleanly. A second one: give up waiting."""

    def handle(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        log_fields(log, "stopping", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)


def _smtp_address(raw: str) -> SmtpTarget:
    """``HOST:PORT`` of a local SMTP catcher (plain SMTP, no login)."""
    host, _, port = raw.rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"must be HOST:PORT, such as 127.0.0.1:1025, got {raw!r}")
    return SmtpTarget(host=host.strip("[]"), port=int(port))


def _port(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {raw!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 1 and 65535, got {value}")
    return value
