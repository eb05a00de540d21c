"""The named-query loader: statements split by their ``-- name:`` lines, each with its comments."""

from __future__ import annotations

import pytest

from receipts import queries


def test_each_statement_keeps_its_name_and_guarantee_lines() -> None:
    """The name comment travels with the statement, so the server and proxies can see it."""
    parsed = queries.parse(
        "-- a file comment\n"
        "-- name: first\n-- Says what it guarantees.\nSELECT 1;\n\n"
        "-- name: second\nSELECT 2\n"
    )
    assert parsed == {
        "first": "-- name: first\n-- Says what it guarantees.\nSELECT 1;",
        "second": "-- name: second\nSELECT 2",
    }


def test_a_name_defined_twice_or_without_a_statement_is_refused() -> None:
    """A typo in a .sql file fails loudly at load time, not as a wrong statement later."""
    with pytest.raises(ValueError, match="twice"):
        queries.parse("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n")
    with pytest.raises(ValueError, match="no statement"):
        queries.parse("-- name: a\n-- only a comment\n")


def test_an_unknown_query_file_fails_at_once() -> None:
    """Asking for a role file that does not exist raises instead of running nothing."""
    with pytest.raises(FileNotFoundError):
        queries.load("no_such_role")
