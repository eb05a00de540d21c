"""The operator-side SQL files: each statement named, guaranteed, used, and in the vocabulary.

Covers ``reports.sql``, ``review.sql``, ``imports.sql``, ``retention.sql`` and
``migrations.sql`` (see ``docs/architecture.md`` for the roles).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import receipts
from receipts import queries
from receipts.vocabulary import RowStatus

ROLES = ("reports", "review", "imports", "retention", "migrations")
PACKAGE = Path(receipts.__file__).parent

# `_REPORTS = queries.load("reports")` … `_REPORTS["timeline_row"]`
_LOADED = re.compile(r'^(_[A-Z]+) = queries\.load\("([a-z_]+)"\)$', re.MULTILINE)
_STATUS_COMPARED = re.compile(r"\bstatus\s*(?:=|<>|!=)\s*'([^']*)'")
_STATUS_IN = re.compile(r"\bstatus\s+(?:NOT\s+)?IN\s*\(([^)]*)\)", re.IGNORECASE)


def names_used_by_the_code() -> dict[str, set[str]]:
    """Every ``(role, name)`` a module under receipts/ looks up, by role."""
    used: dict[str, set[str]] = {role: set() for role in ROLES}
    for module in PACKAGE.rglob("*.py"):
        source = module.read_text(encoding="utf-8")
        for variable, role in _LOADED.findall(source):
            if role in used:
                lookups = re.findall(re.escape(variable) + r'\["([a-z0-9_]+)"\]', source)
                used[role].update(lookups)
    return used


@pytest.mark.parametrize("role", ROLES)
def test_every_statement_has_one_line_saying_what_it_guarantees(role: str) -> None:
    """Under each ``-- name:`` line comes exactly one comment line, then the statement."""
    for name, statement in queries.load(role).items():
        lines = statement.splitlines()
        assert lines[0] == f"-- name: {name}"
        assert lines[1].startswith("-- ") and len(lines[1]) > 10, name
        assert not lines[2].startswith("--"), f"{name}: more than one guarantee line"


@pytest.mark.parametrize("role", ROLES)
def test_the_code_asks_only_for_statements_that_exist_and_uses_them_all(role: str) -> None:
    """A misspelt name would fail only when that path runs; an unused statement is dead SQL."""
    defined = set(queries.load(role))
    used = names_used_by_the_code()[role]
    assert used - defined == set()
    assert defined - used == set()


@pytest.mark.parametrize("role", ROLES)
def test_every_row_status_a_statement_compares_with_is_in_the_vocabulary(role: str) -> None:
    """A misspelt status in a condition silently matches nothing (a write would at
    least fail the table's CHECK): each one written in SQL is a RowStatus value."""
    statuses = {status.value for status in RowStatus}
    for name, statement in queries.load(role).items():
        compared = set(_STATUS_COMPARED.findall(statement))
        for listed in _STATUS_IN.findall(statement):
            compared.update(re.findall(r"'([^']*)'", listed))
        assert compared <= statuses, name
