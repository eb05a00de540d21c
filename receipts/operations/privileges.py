"""Which of its statements a database role may not run, and how to say so in one line.

Each process runs a known set of named statements (``receipts/queries``). To
check a role without changing a row, each statement is prepared and
explained as that role: the executor checks the privileges on every table
and column it touches before it would read one, so a statement the role may
not run fails there with "permission denied". ``receipts doctor`` reports
every refusal per process; a command that hits one names the privilege it
lacks instead of printing a traceback (:func:`denied_line`).

Row-level security (``sql/roles/least_privilege.sql``) is not part of this
check: which *rows* a role may write is decided when it writes them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import psycopg
from psycopg import sql

from receipts import queries
from receipts.db import Connection, connect, describe_error

_P = queries.load("privileges")
_PARAMETER = re.compile(r"%\((\w+)\)s")
_TABLE_IN_ERROR = re.compile(r'permission denied for (?:table|relation) "?(\w+)"?')
# Statements the executor plans: prepared and explained. The rest need no
# privilege (SET LOCAL, LISTEN), create the session's own table first (CREATE
# TEMPORARY: run for real, in the rolled-back transaction), or are skipped.
_PLANNED = ("select", "insert", "update", "delete", "with", "values")

# Every statement each process runs, by query file; None: all of the file.
_WEB_REPORTS = frozenset(
    [
        "count_rows_by_status",
        "count_review_rows_by_reason",
        "oldest_ready_pending_age",
        "closest_to_retry_cutoff",
        "recent_activity",
        "recent_delivery_problems",
        "provider_answers_by_class",
        "provider_latency",
    ]
)
_WEB_STRIPE = frozenset(
    [
        "record_thin_event",
        "hold_event_for_lookups",
        "recorded_event",
        "note_thin_fetch_failed",
        "resolve_thin_event",
        "thin_events_waiting",
        "last_reconcile_run",
    ]
)
# Backfill and reconcile resolve stored thin notifications; only the web process stores them.
_OPERATOR_STRIPE = frozenset(
    [
        "recorded_event",
        "note_thin_fetch_failed",
        "resolve_thin_event",
        "pending_thin_events",
        "mark_event_source",
        "recorded_events",
        "existing_receipts",
        "record_reconcile_run",
        "last_reconcile_run",
        "thin_events_waiting",
        "metrics_statement_timeout",
        "wake_workers",
    ]
)
_OPERATOR_INGEST = frozenset(
    ["ingest_event", "insert_outbox_row", "outbox_fingerprint", "record_stripe_event"]
)
PROCESS_STATEMENTS: dict[str, dict[str, frozenset[str] | None]] = {
    "web": {"ingest": None, "health": None, "reports": _WEB_REPORTS, "stripe_api": _WEB_STRIPE},
    "worker": {"delivery": None},
    "operator": {
        "reports": None,
        "review": None,
        "imports": None,
        "stripe_api": _OPERATOR_STRIPE,
        # (not the write probe: only /readyz writes it)
        "health": frozenset({"accepts_writes", "durable_commits", "migrations_applied"}),
        "migrations": frozenset({"applied_migration_versions"}),
        "ingest": _OPERATOR_INGEST,
        # the support console (RECEIPTS_CONSOLE_DATABASE_URL): failed logins, its chart
        "console": None,
    },
    "owner": {"retention": None},
}

# Which process's statements each subcommand runs.
COMMAND_PROCESS = {
    "worker": "worker",
    "prune": "owner",
    **{
        command: "operator"
        for command in ("status", "show", "review", "import", "backfill", "reconcile", "doctor")
    },
}

# The query files a command mostly runs: their refusals are named first.
COMMAND_FILES = {
    "status": ("reports", "stripe_api"),
    "show": ("reports",),
    "review": ("review", "reports"),
    "import": ("imports",),
    "backfill": ("stripe_api", "ingest"),
    "reconcile": ("stripe_api", "ingest"),
    "doctor": ("migrations", "health"),
}

# The group role each process's login role belongs to (least_privilege.sql).
GROUP_SUFFIX = {"web": "_web", "worker": "_worker", "operator": "_operator"}


@dataclass(frozen=True, kw_only=True)
class Refusal:
    """One statement the role may not run, and the privilege it lacks."""

    statement: str  # file.sql: name
    reason: str  # the server's words
    needs: str  # e.g. "INSERT on operator_actions", or the server's words when unknown


def statements(process: str) -> list[tuple[str, str, str]]:
    """(query file, name, text) of every statement ``process`` runs, in file order."""
    found = []
    for file, names in PROCESS_STATEMENTS[process].items():
        for name, text in queries.load(file).items():
            if names is None or name in names:
                found.append((file, name, text))
    return found


def refusals(conn: Connection, process: str) -> list[Refusal]:
    """The statements of ``process`` this connection's role may not run; none is run."""
    refused = []
    with conn.transaction(force_rollback=True):
        for file, name, text in statements(process):
            problem = _check(conn, text)
            if problem is not None:
                table = _refused_table(problem)
                needs = _needs(conn, text, table) if table else problem
                refused.append(
                    Refusal(statement=f"{file}.sql: {name}", reason=problem, needs=needs)
                )
    return refused


def current_role(conn: Connection) -> str:
    found = conn.execute(_P["current_role"]).fetchone()
    return str(found["role"]) if found else "?"


def _check(conn: Connection, text: str) -> str | None:
    """Why the role may not run this statement, or None if it may."""
    keyword = _first_keyword(text)
    if keyword not in _PLANNED and not text_starts_temporary(text):
        return None
    try:
        with conn.transaction():
            if keyword not in _PLANNED:
                conn.execute(text.encode())
                return None
            names: list[str] = []
            numbered = _PARAMETER.sub(lambda m: _number(m.group(1), names), text)
            prepare = queries.statement("privileges", "prepare_checked")
            conn.execute(prepare.format(statement=sql.SQL(numbered)))
            arguments = sql.SQL("({})").format(sql.SQL(", ").join([sql.NULL] * len(names)))
            conn.execute(
                queries.statement("privileges", "explain_checked").format(
                    arguments=arguments if names else sql.SQL("")
                )
            )
            conn.execute(_P["deallocate_checked"])
    except psycopg.ProgrammingError as exc:
        # Permission denied; or a missing column or table: migrations not applied.
        _forget_prepared(conn)
        return describe_error(exc)
    return None


def _forget_prepared(conn: Connection) -> None:
    """Prepared statements outlive a rollback; PREPARE itself may have been refused."""
    try:
        with conn.transaction():
            conn.execute(_P["deallocate_checked"])
    except psycopg.errors.InvalidSqlStatementName:
        pass


def text_starts_temporary(text: str) -> bool:
    code = " ".join(line for line in text.splitlines() if line and not line.startswith("--"))
    return code.upper().startswith("CREATE TEMPORARY TABLE")


def _number(name: str, names: list[str]) -> str:
    if name not in names:
        names.append(name)
    return f"${names.index(name) + 1}"


def _first_keyword(text: str) -> str:
    code = [line for line in text.splitlines() if line and not line.startswith("--")]
    return code[0].split(None, 1)[0].lower() if code else ""


def _refused_table(problem: str) -> str | None:
    match = _TABLE_IN_ERROR.search(problem)
    return match.group(1) if match else None


def _needs(conn: Connection, text: str, table: str) -> str:
    """``INSERT on operator_actions``: what the statement does to the refused table that
    the role may not (``on some columns only`` when a column grant covers part of it)."""
    lacking = []
    for privilege in _privileges_used(text, table):
        held = conn.execute(_P["table_privileges"], {"table": table, "privilege": privilege})
        found = held.fetchone()
        if found is None or found["on_table"]:
            continue
        partly = " (it has it on some columns only)" if found["on_some_columns"] else ""
        lacking.append(f"{privilege.upper()} on {table}{partly}")
    return ", ".join(lacking) or f"a privilege on {table}"


def _privileges_used(text: str, table: str) -> list[str]:
    name = re.escape(table)
    used = []
    if re.search(rf"\binsert\s+into\s+{name}\b", text, re.I):
        used.append("insert")
    if re.search(rf"\bupdate\s+{name}\b", text, re.I) or re.search(r"\bfor\s+update\b", text, re.I):
        used.append("update")
    if re.search(rf"\bdelete\s+from\s+{name}\b", text, re.I):
        used.append("delete")
    if re.search(rf"\b(from|join)\s+{name}\b", text, re.I) or "returning" in text.lower():
        used.append("select")
    return used or ["select"]


def denied_line(command: str, error: psycopg.Error, database_url: str | None) -> str:
    """One line for a command the database refused: the role, what it lacks, what to do."""
    process = COMMAND_PROCESS.get(command)
    role, needs = "?", describe_error(error)
    if database_url is not None:
        try:
            with connect(database_url) as conn:
                role = current_role(conn)
                refused = refusals(conn, process) if process else []
            own = COMMAND_FILES.get(command, ())
            refused.sort(key=lambda refusal: _rank(refusal.statement, own))
            if refused:
                needs = f"{refused[0].needs} ({refused[0].statement})"
        except psycopg.Error:
            pass  # the server's own words are all we have
    return (
        f"the database role {role!r} lacks a privilege this command needs: {needs}. "
        f"{advice(process)}"
    )


def _rank(statement: str, own: tuple[str, ...]) -> int:
    file = statement.split(".sql", 1)[0]
    return own.index(file) if file in own else len(own)


def advice(process: str | None) -> str:
    """Which role to connect as, for the README's per-process set-up."""
    if process in GROUP_SUFFIX:
        return (
            f"Connect as a member of <prefix>{GROUP_SUFFIX[process]} and rerun "
            "sql/roles/least_privilege.sql after each migration (README: Least privilege)."
        )
    return "Run it as the owner of the tables (README: Least privilege)."
