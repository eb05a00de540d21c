"""Test databases: a real PostgreSQL server, and a database of its own for every test.

The server is ``DATABASE_URL`` when it is set, or else one embedded server
shared by every process of the test run (pytest-xdist workers included),
started by the first process that needs it and stopped by the last to leave.

Each test process migrates a template database once. A test gets a database
cloned from that template; when the test ends the database is not dropped but
made clean for the next test of the same process:

1. every connection to it is terminated (code under test may have left a pool
   or a process behind);
2. it is renamed, so a URL is only ever handed to one test: anything the last
   test left running cannot reach the next test's rows;
3. its rows are deleted and its sequences restarted, as the template has them.

Measured on this project's 2-core machine: CREATE DATABASE … TEMPLATE took
150-200 ms (it copies the template through the WAL) and DROP DATABASE 30-60 ms
more; the three steps above take about 10 ms, a fresh clone only the first
time. A database whose schema, grants or migration history the test
changed (a catalog row written after the database was handed out, or
``schema_migrations`` not as the template has it) is dropped instead of
reused, and the next test gets a fresh clone.

A test that needs the template changed once more (the role script applied,
say) asks for a :class:`Prepared` kind: the change is made once per process
to a template of its own, and databases of that kind are cut from it and
reused among themselves the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from receipts.dev.embedded import EmbeddedServer, start_server, with_database
from receipts.migrations import migrate

# Catalogs of one database that any DDL, GRANT or ALTER writes to.
_SCHEMA_CATALOGS = (
    "pg_class",
    "pg_attribute",
    "pg_attrdef",
    "pg_constraint",
    "pg_index",
    "pg_namespace",
    "pg_type",
    "pg_proc",
    "pg_trigger",
    "pg_rewrite",
    "pg_policy",
    "pg_sequence",
    "pg_default_acl",
    "pg_extension",
    "pg_event_trigger",
    "pg_largeobject_metadata",
)

# Any row of those catalogs written after the database was handed out, as seen
# from the database itself. age() counts back from the next transaction id, so
# a row written later than the mark has a smaller age.
# (The scratch namespaces of temporary tables stay behind when a session ends;
# what was in them went with the session.)
_CHANGED_SINCE = sql.SQL(" UNION ALL ").join(
    sql.SQL("SELECT 1 FROM {} WHERE age(xmin) <= age(xid({mark}::xid8)){extra}").format(
        sql.Identifier(catalog),
        mark=sql.Placeholder("mark"),
        extra=sql.SQL(
            r" AND nspname NOT LIKE 'pg\_%%temp\_%%'" if catalog == "pg_namespace" else ""
        ),
    )
    for catalog in _SCHEMA_CATALOGS
)
_SETTINGS_OF_THIS_DATABASE = """
    SELECT 1 FROM pg_db_role_setting
     WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())"""
_MIGRATION_HISTORY = """
    SELECT coalesce(string_agg(version || name, ',' ORDER BY version), '') FROM schema_migrations"""
_USER_TABLES = """
    SELECT c.oid::regclass::text AS name
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
       AND n.nspname NOT LIKE 'pg_toast%' AND n.nspname NOT LIKE 'pg_temp%'
       AND c.relname <> 'schema_migrations'"""
_FOREIGN_KEYS = """
    SELECT conrelid::regclass::text AS child, confrelid::regclass::text AS parent
      FROM pg_constraint WHERE contype = 'f' AND conrelid <> confrelid"""
_SEQUENCES = """
    SELECT format('%I.%I', schemaname, sequencename), start_value FROM pg_sequences"""


@dataclass(frozen=True)
class _Template:
    """What a clean clone of the template holds: the tables to empty, children
    first, its sequences and its migration history."""

    name: str
    tables: tuple[str, ...]
    sequences: tuple[tuple[str, int], ...]
    history: str


@dataclass(frozen=True)
class Prepared:
    """A kind of test database: migrated, then changed by ``prepare(url)`` (once per
    process, on a template of the kind's own). ``name`` tells kinds apart."""

    name: str
    prepare: Callable[[str], object]


@dataclass
class DatabasePool:
    """The databases of one test process on one server."""

    server_url: str
    # Unique on the server: a database left by a killed run never blocks this one.
    prefix: str = field(default_factory=lambda: f"receipts_{os.getpid()}_{secrets.token_hex(2)}")
    _numbers: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _template: _Template | None = None
    _prepared: dict[str, str] = field(default_factory=dict)  # kind -> its template
    _clean: dict[str, list[str]] = field(default_factory=dict)  # kind -> ready to hand out
    _marks: dict[str, str] = field(default_factory=dict)  # name -> xid when handed out
    _admin: psycopg.Connection[Any] | None = None

    def url(self, name: str) -> str:
        return with_database(self.server_url, name)

    @contextlib.contextmanager
    def migrated(self, kind: Prepared | None = None) -> Iterator[str]:
        """A migrated database of its own (of ``kind``, if given) for the block."""
        kind_name = kind.name if kind is not None else ""
        clean = self._clean.setdefault(kind_name, [])
        name = clean.pop() if clean else self._clone(kind)
        self._marks[name] = self._scalar(
            self._admin_connection(), "SELECT pg_current_xact_id()::text"
        )
        try:
            yield self.url(name)
        finally:
            self._give_back(name, kind_name)

    @contextlib.contextmanager
    def empty(self) -> Iterator[str]:
        """A database with no tables at all (for migration tests); dropped afterwards."""
        name = self._new_name("e")
        self._admin_connection().execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:
            yield self.url(name)
        finally:
            self._drop(name)

    def forget(self, kind_name: str) -> None:
        """Drop the template and the clean databases of a prepared kind (before the
        roles its preparation granted to are dropped, say)."""
        for name in self._clean.pop(kind_name, []):
            self._drop(name)
        template = self._prepared.pop(kind_name, None)
        if template is not None:
            self._drop(template)

    def close(self) -> None:
        """Drop every database this process still has."""
        for kind_name in list(self._prepared):
            self.forget(kind_name)
        for names in self._clean.values():
            for name in names:
                self._drop(name)
        self._clean.clear()
        if self._template is not None:
            self._drop(self._template.name)
            self._template = None
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    # --- internals -------------------------------------------------------------------

    def _admin_connection(self) -> psycopg.Connection[Any]:
        if self._admin is None or self._admin.closed:
            self._admin = psycopg.connect(self.url("postgres"), autocommit=True)
        return self._admin

    @staticmethod
    def _scalar(conn: psycopg.Connection[Any], query: Any, params: Any = None) -> Any:
        row = conn.execute(query, params).fetchone()
        assert row is not None
        return row[0]

    def _new_name(self, kind: str) -> str:
        return f"{self.prefix}_{kind}{next(self._numbers)}"

    def _template_info(self) -> _Template:
        if self._template is None:
            name = self._new_name("tpl")
            admin = self._admin_connection()
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            migrate(self.url(name))
            with psycopg.connect(self.url(name), autocommit=True) as conn:
                tables = [row[0] for row in conn.execute(_USER_TABLES)]
                edges = [(row[0], row[1]) for row in conn.execute(_FOREIGN_KEYS)]
                sequences = tuple((row[0], row[1]) for row in conn.execute(_SEQUENCES))
                history = self._scalar(conn, _MIGRATION_HISTORY)
            self._template = _Template(name, _children_first(tables, edges), sequences, history)
        return self._template

    def _clone(self, kind: Prepared | None = None) -> str:
        template = self._template_info().name if kind is None else self._prepared_template(kind)
        name = self._new_name("t")
        self._admin_connection().execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )
        return name

    def _prepared_template(self, kind: Prepared) -> str:
        if kind.name not in self._prepared:
            name = self._clone()
            kind.prepare(self.url(name))
            # Renamed alone: no session the preparation left can reach a clone.
            self._prepared[kind.name] = self._rename_alone(name)
        return self._prepared[kind.name]

    def _give_back(self, name: str, kind_name: str = "") -> None:
        mark = self._marks.pop(name)
        try:
            name = self._rename_alone(name)
            if self._reset(name, mark):
                self._clean.setdefault(kind_name, []).append(name)
                return
        except (psycopg.OperationalError, psycopg.errors.ObjectInUse):
            pass  # sessions that would not end, rows locked past the lock timeout
        self._drop(name)

    def _rename_alone(self, name: str) -> str:
        """End every session on ``name`` and give the database a new name.

        pg_terminate_backend's own wait polls in steps of 100 ms, and so does the
        rename when a session is still on its way out; a closed or terminated
        session is usually gone within a millisecond, so poll faster here.
        """
        admin = self._admin_connection()
        new_name = self._new_name("t")
        deadline = time.monotonic() + 10
        while True:
            sessions = admin.execute(
                """SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                    WHERE datname = %s AND pid <> pg_backend_pid()""",
                (name,),
            ).fetchall()
            if not sessions:
                try:
                    admin.execute(
                        sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                            sql.Identifier(name), sql.Identifier(new_name)
                        )
                    )
                    return new_name
                except psycopg.errors.ObjectInUse:
                    pass  # a session connected meanwhile, or was still leaving
            if time.monotonic() > deadline:
                raise psycopg.errors.ObjectInUse(f"sessions on {name} would not end")
            time.sleep(0.002)

    def _reset(self, name: str, mark: str) -> bool:
        """Empty the tables of ``name``; False when the test changed more than rows."""
        template = self._template_info()
        with psycopg.connect(self.url(name), options="-c lock_timeout=5s") as conn:
            changed = self._scalar(
                conn,
                sql.SQL("SELECT EXISTS ({}) OR EXISTS ({})").format(
                    _CHANGED_SINCE, sql.SQL(_SETTINGS_OF_THIS_DATABASE)
                ),
                {"mark": mark},
            )
            if changed or self._scalar(conn, _MIGRATION_HISTORY) != template.history:
                return False
            for table in template.tables:
                conn.execute(sql.SQL("DELETE FROM {}").format(sql.SQL(table)))
            for sequence, start in template.sequences:
                conn.execute("SELECT setval(%s::regclass, %s, false)", (sequence, start))
        return True

    def _drop(self, name: str) -> None:
        self._admin_connection().execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def _children_first(tables: list[str], edges: list[tuple[str, str]]) -> tuple[str, ...]:
    """``tables`` ordered so that a table comes before every table it references."""
    ordered: list[str] = []
    remaining = sorted(tables)
    while remaining:
        # A table whose referencing tables are all emptied already.
        ready = [
            t for t in remaining if all(c in ordered for c, p in edges if p == t and c in tables)
        ]
        if not ready:
            raise RuntimeError(f"foreign keys form a cycle among {remaining}")
        ordered.extend(ready)
        remaining = [t for t in remaining if t not in ready]
    return tuple(ordered)


@contextlib.contextmanager
def shared_embedded_server(run_id: str, temp_dir: Path) -> Iterator[str]:
    """An embedded server for every process of test run ``run_id``; yields an admin URL.

    Its data directory is under ``temp_dir``, the same for every process of the
    run. The first process to get here creates and starts it (under a file lock,
    so the others wait rather than race to initialize it) and the others attach;
    the last to leave stops it and deletes its data directory. It runs with
    fsync off: a throwaway server need not survive a crash of the machine.
    """
    data_dir = temp_dir / f"receipts-test-{run_id}-{os.getuid()}" / "pgdata"
    lock_path = data_dir.parent.with_name(data_dir.parent.name + ".lock")
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        server: EmbeddedServer = start_server(data_dir, delete_on_exit=True)
        with psycopg.connect(server.get_uri("postgres"), autocommit=True) as conn:
            # This server lives for one test run and is deleted after it: nothing
            # on it must survive the machine crashing, so it need not wait for the
            # disk at every commit. (Tests kill clients and proxies, never the
            # machine; the embedded-server tests start servers of their own.)
            conn.execute("ALTER SYSTEM SET fsync = off")
            conn.execute("SELECT pg_reload_conf()")
    try:
        yield server.get_uri("postgres")
    finally:
        server.cleanup()
        if not data_dir.exists():
            lock_path.unlink(missing_ok=True)


def run_id() -> str:
    """Shared by every process of this test run: xdist's run id, or this process's id."""
    return os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:12] or str(os.getpid())


__all__ = ["DatabasePool", "Prepared", "run_id", "shared_embedded_server"]
