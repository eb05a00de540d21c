"""Every SQL statement the product runs, read from one ``.sql`` file per role.

Each file in this folder holds named statements::

    -- name: insert_outbox_row
    -- One row per message key: a second insert of the same key does nothing.
    insert into email_outbox ...

The comment lines travel with the statement to the server, so
``pg_stat_activity``, the server log and the fault lab's TCP proxy all see
which statement it is. Parameters are psycopg's ``%(name)s`` placeholders.

A file is read once per process. ``load("ingest")["insert_outbox_row"]``
returns the statement text; an unknown file or name raises ``KeyError`` at
the first use, which the tests exercise for every name the code asks for.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from types import MappingProxyType
from typing import LiteralString

from psycopg import sql

_NAME_LINE = re.compile(r"^-- name: ([a-z][a-z0-9_]*)\s*$", re.MULTILINE)

Queries = MappingProxyType[str, LiteralString]


def parse(text: str) -> dict[str, LiteralString]:
    """Split a file's text into ``{name: statement}``, each with its comment lines."""
    marks = list(_NAME_LINE.finditer(text))
    statements: dict[str, LiteralString] = {}
    for mark, following in zip(marks, [*marks[1:], None], strict=True):
        end = following.start() if following is not None else len(text)
        body = text[mark.start() : end].strip()
        name = mark.group(1)
        if name in statements:
            raise ValueError(f"query {name!r} is defined twice")
        if not any(line and not line.startswith("--") for line in body.splitlines()):
            raise ValueError(f"query {name!r} has no statement")
        # Text read from our own package files: trusted like a literal.
        statements[name] = body  # type: ignore[assignment,unused-ignore]
    return statements


@functools.cache
def load(role: str) -> Queries:
    """The named statements of ``receipts/queries/{role}.sql``."""
    text = resources.files(__name__).joinpath(f"{role}.sql").read_text(encoding="utf-8")
    return MappingProxyType(parse(text))


def statement(role: str, name: str) -> sql.SQL:
    """One named statement as a composable ``psycopg.sql.SQL`` (for ``.format``)."""
    return sql.SQL(load(role)[name])
