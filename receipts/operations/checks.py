"""What ``receipts doctor`` checks on this side of the network: settings, database, templates.

Each check returns :class:`Check` values, one per thing that can be wrong, with
a detail a person can act on. None of them changes anything: the database is
only read (privileges are checked by preparing statements, never running
them; see :mod:`receipts.operations.privileges`), and a NOTIFY goes to a
channel of the check's own.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg import sql

from receipts import queries
from receipts.config import ConfigError, Settings, load_settings
from receipts.db import Connection, connect, describe_error
from receipts.migrations import load_migrations
from receipts.operations import privileges

_DOCTOR = queries.load("doctor")
NOTIFY_WAIT_SECONDS = 2.0


@dataclass(frozen=True, kw_only=True)
class Check:
    """One line of ``receipts doctor``: ``ok|FAIL name: detail``."""

    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok' if self.ok else 'FAIL'} {self.name}: {self.detail}"


def parse_settings(environ: Mapping[str, str]) -> tuple[Settings, Check]:
    """The settings, with every malformed variable reported and then left out."""
    remaining = dict(environ)
    problems = []
    for _ in range(len(environ) + 1):
        try:
            settings = load_settings(remaining)
            break
        except ConfigError as error:
            problems.append(str(error))
            remaining.pop(error.variable, None)
    else:  # pragma: no cover - each round removes a variable
        settings = Settings()
    if problems:
        return settings, Check(name="settings", ok=False, detail="; ".join(problems))
    return settings, Check(name="settings", ok=True, detail="every variable parses")


def where(url: str) -> str:
    """``host:port/database as user``, never the password."""
    parts = urlsplit(url)
    return f"{parts.hostname or 'local socket'}:{parts.port or 5432}{parts.path or '/'}"


def database_checks(settings: Settings) -> list[Check]:
    """Reachable, migrations current, and each process's role allowed what it runs."""
    if settings.database_url is None:
        return [Check(name="database", ok=False, detail="DATABASE_URL is not set")]
    try:
        conn = connect(settings.database_url)
    except Exception as exc:
        detail = f"cannot connect to {where(settings.database_url)}: {describe_error(exc)}"
        return [Check(name="database", ok=False, detail=detail)]
    with conn:
        found = conn.execute(_DOCTOR["server"]).fetchone() or {}
        reached = Check(
            name="database",
            ok=True,
            detail=f"PostgreSQL {found.get('version')} at {where(settings.database_url)} "
            f"as {found.get('role')}",
        )
        checks = [reached, _migrations(conn)]
    checks += role_checks(settings)
    checks.append(pooling_check(settings))
    checks.append(listen_check(settings))
    return checks


def _migrations(conn: Connection) -> Check:
    known = {migration.version: migration.name for migration in load_migrations()}
    try:
        with conn.transaction():
            rows = conn.execute(queries.load("migrations")["applied_migration_versions"]).fetchall()
    except psycopg.errors.UndefinedTable:
        return Check(name="migrations", ok=False, detail="none applied: run `receipts migrate`")
    except psycopg.ProgrammingError as exc:
        return Check(name="migrations", ok=False, detail=f"cannot read: {describe_error(exc)}")
    applied = {row["version"] for row in rows}
    pending = [name for version, name in sorted(known.items()) if version not in applied]
    unknown = sorted(applied - known.keys())
    if pending:
        detail = f"{len(pending)} not applied: {', '.join(pending)}: run `receipts migrate`"
        return Check(name="migrations", ok=False, detail=detail)
    if unknown:
        detail = (
            f"the database has migrations this release does not know ({unknown}): an older "
            "release is running against a newer schema"
        )
        return Check(name="migrations", ok=False, detail=detail)
    latest = known[max(known)] if known else "none"
    return Check(name="migrations", ok=True, detail=f"all {len(known)} applied (latest {latest})")


def process_urls(settings: Settings) -> dict[str, tuple[str, str]]:
    """Each process's (variable, URL): its own variable, else DATABASE_URL."""
    assert settings.database_url is not None
    default = ("DATABASE_URL", settings.database_url)
    return {
        "web": ("RECEIPTS_WEB_DATABASE_URL", settings.web_database_url)
        if settings.web_database_url
        else default,
        "worker": ("RECEIPTS_WORKER_DATABASE_URL", settings.worker_database_url)
        if settings.worker_database_url
        else default,
        "operator": default,
    }


def role_checks(settings: Settings) -> list[Check]:
    """Whether each process's role may run every statement that process runs."""
    checks = []
    for process, (variable, url) in process_urls(settings).items():
        name = f"{process}-role"
        try:
            with connect(url) as conn:
                role = privileges.current_role(conn)
                refused = privileges.refusals(conn, process)
        except Exception as exc:
            detail = f"cannot connect with {variable}: {describe_error(exc)}"
            checks.append(Check(name=name, ok=False, detail=detail))
            continue
        total = len(privileges.statements(process))
        if not refused:
            detail = f"{role} ({variable}) may run all {total} statements of the {process} process"
            checks.append(Check(name=name, ok=True, detail=detail))
            continue
        first = refused[0]
        more = f", and {len(refused) - 1} more statement(s)" if len(refused) > 1 else ""
        detail = (
            f"{role} ({variable}) lacks {first.needs} ({first.statement}){more}. "
            f"{privileges.advice(process)}"
        )
        checks.append(Check(name=name, ok=False, detail=detail))
    return checks


def pooling_check(settings: Settings) -> Check:
    """Whether DATABASE_URL goes through a transaction pooler, and the setting agrees."""
    assert settings.database_url is not None
    try:
        pooled = _hands_out_server_connections(settings.database_url)
    except Exception as exc:
        return Check(name="pooling", ok=False, detail=f"cannot tell: {describe_error(exc)}")
    named = settings.database_pooling == "transaction"
    if pooled and not named:
        return Check(
            name="pooling",
            ok=False,
            detail="DATABASE_URL goes through a transaction pooler (two transactions of one "
            "connection ran on different server processes): set "
            "RECEIPTS_DATABASE_POOLING=transaction",
        )
    if pooled:
        return Check(name="pooling", ok=True, detail="a transaction pooler, as the setting says")
    hint = _pooler_hint(settings.database_url)
    if hint and not named:
        detail = f"a direct connection, though {hint}: a session pooler, or a direct port"
        return Check(name="pooling", ok=True, detail=detail)
    kind = "a session pooler or a direct connection" if named else "a direct connection"
    return Check(name="pooling", ok=True, detail=kind)


def _hands_out_server_connections(url: str) -> bool:
    """Transaction pooling seen from the client: while a second connection holds a
    transaction, the first one's next transaction runs on another server process (or
    the second got the first one's process). A direct connection keeps its process."""
    probe = _DOCTOR["backend_pid"]
    with connect(url, autocommit=True) as first, connect(url, autocommit=True) as second:
        before = _scalar(first.execute(probe))
        with second.transaction():
            held = _scalar(second.execute(probe))
            if held == before:
                return True
            # The pooler has another server process idle (the second did not get the
            # first's), so this cannot queue behind the held transaction.
            after = _scalar(first.execute(probe))
    return after != before


def _scalar(cursor: Any) -> object:
    row = cursor.fetchone()
    return None if row is None else row["pid"]


# Hosts and the port the common poolers use (PgBouncer's 6432; Supabase's and
# Neon's pooler host names).
_POOLER_PORTS = (6432,)
_POOLER_HOST_WORDS = ("pooler", "pgbouncer", "bouncer")


def _pooler_hint(url: str) -> str | None:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if any(word in host for word in _POOLER_HOST_WORDS):
        return f"the host name {host!r} names a pooler"
    with contextlib.suppress(ValueError):
        if parts.port in _POOLER_PORTS:
            return f"port {parts.port} is PgBouncer's"
    return None


def listen_check(settings: Settings) -> Check:
    """A NOTIFY reaches a LISTEN on the connection `receipts worker --loop` listens on."""
    url = settings.database_direct_url or settings.worker_database_url or settings.database_url
    variable = "DATABASE_DIRECT_URL" if settings.database_direct_url else "the worker's URL"
    assert url is not None
    if settings.database_direct_url is None and not settings.prepared_statements:
        return Check(
            name="listen",
            ok=True,
            detail="DATABASE_URL goes through a transaction pooler and DATABASE_DIRECT_URL is "
            "not set: `receipts worker --loop` polls instead of being woken",
        )
    channel = f"receipts_doctor_{secrets.token_hex(4)}"
    try:
        heard = _notify_round_trip(url, channel)
    except Exception as exc:
        return Check(name="listen", ok=False, detail=f"{variable}: {describe_error(exc)}")
    if heard:
        return Check(name="listen", ok=True, detail=f"a NOTIFY reaches a LISTEN on {variable}")
    return Check(
        name="listen",
        ok=False,
        detail=f"a NOTIFY did not reach a LISTEN on {variable} within {NOTIFY_WAIT_SECONDS:g} s: "
        "behind PgBouncer in transaction mode set RECEIPTS_DATABASE_POOLING=transaction and "
        "DATABASE_DIRECT_URL",
    )


def _notify_round_trip(url: str, channel: str) -> bool:
    with connect(url, autocommit=True) as listener, connect(url, autocommit=True) as sender:
        listener.execute(
            queries.statement("doctor", "listen_probe").format(sql.Identifier(channel))
        )
        sender.execute(_DOCTOR["notify_probe"], {"channel": channel})
        deadline = time.monotonic() + NOTIFY_WAIT_SECONDS
        while time.monotonic() < deadline:
            for notification in listener.notifies(timeout=0.2):
                if notification.channel == channel:
                    return True
    return False


# A paid invoice every template must be able to render.
SAMPLE_EVENT: dict[str, Any] = {
    "id": "evt_1DoctorSample",
    "object": "event",
    "type": "invoice.paid",
    "livemode": False,
    "created": 1764460801,
    "data": {
        "object": {
            "id": "in_1DoctorSample",
            "object": "invoice",
            "number": "DOCTOR-0001",
            "status": "paid",
            "amount_paid": 1999,
            "total": 1999,
            "subtotal": 1999,
            "currency": "usd",
            "customer_email": "jenny.rosen@example.com",
            "customer_name": "Jenny Rosen",
            "hosted_invoice_url": "https://invoice.stripe.com/i/acct_1Doctor/test_doctor",
            "status_transitions": {"paid_at": 1764460800},
        }
    },
}


def templates_check(settings: Settings) -> Check:
    """The templates (packaged or RECEIPTS_TEMPLATE_DIR) compile and render the sample."""
    from receipts.receipt.derivation import ReceiptJob, derive_receipt
    from receipts.receipt.event import parse_event
    from receipts.receipt.payload import render_payload
    from receipts.receipt.rendering import Renderer

    where = str(settings.template_dir) if settings.template_dir else "the packaged templates"
    try:
        renderer = Renderer.from_settings(settings)
        header = parse_event(json.loads(json.dumps(SAMPLE_EVENT)))
        decision = derive_receipt(header, email_from=settings.email_from or "")
        if not isinstance(decision, ReceiptJob):
            return Check(name="templates", ok=False, detail=f"{where}: the sample made no email")
        payload = render_payload(decision.message_key, decision.render_input, renderer)
    except Exception as exc:
        return Check(name="templates", ok=False, detail=f"{where}: {_template_error(exc)}")
    subject = payload["subject"]
    detail = f"{where} render the sample invoice ({settings.locale}): subject {subject!r}"
    return Check(name="templates", ok=True, detail=detail)


def _template_error(error: Exception) -> str:
    """``invoice_paid/body.html line 3: unexpected '}'``, or the error's first line."""
    line = getattr(error, "lineno", None)
    name = getattr(error, "filename", None) or getattr(error, "name", None)
    message = getattr(error, "message", None) or describe_error(error)
    if name and line:
        return f"{name} line {line}: {message}"
    return f"{type(error).__name__}: {message}"


def webhook_secret_check(settings: Settings, environ: Mapping[str, str]) -> Check:
    count = len(settings.stripe_webhook_secrets)
    if count:
        return Check(name="webhook-secret", ok=True, detail=f"{count} Stripe signing secret(s)")
    if "STRIPE_WEBHOOK_SECRET" in environ:
        detail = "STRIPE_WEBHOOK_SECRET is set but empty or malformed (see settings)"
    else:
        detail = "STRIPE_WEBHOOK_SECRET is not set: every Stripe delivery would be refused"
    return Check(name="webhook-secret", ok=False, detail=detail)
