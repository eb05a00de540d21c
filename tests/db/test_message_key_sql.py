"""The SQL that derives a message key or a provider tag agrees with receipts.message_keys.

Each expression is read from the files that hold it (the named queries and the
role policies) and evaluated by PostgreSQL on generated keys, so a change to
either side that the other does not follow fails here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from receipts.message_keys import message_key, provider_tag

ROOT = Path(__file__).resolve().parents[2]
SQL_FILES = [
    *sorted((ROOT / "receipts" / "queries").glob("*.sql")),
    ROOT / "sql/roles/least_privilege.sql",
]
TAG_EXPRESSION = re.compile(r"left\(regexp_replace\(message_key, [^)]*\), \d+\)")
KEY_EXPRESSION = re.compile(
    r"account \|\| '/' \|\| CASE WHEN livemode THEN 'live' ELSE 'test' END\s*\|\| '/' \|\| "
    r"invoice_id \|\| '/' \|\| purpose"
)
EXAMPLES = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
Db = psycopg.Connection[dict[str, Any]]


def expressions(pattern: re.Pattern[str]) -> set[str]:
    return {found for path in SQL_FILES for found in pattern.findall(path.read_text())}


def test_the_sql_derives_tags_and_keys_in_the_places_the_docs_name() -> None:
    """The scan finds the expressions (so the properties below test something)."""
    assert len(expressions(TAG_EXPRESSION)) == 1  # one spelling, wherever it stands
    assert len(expressions(KEY_EXPRESSION)) == 1


@EXAMPLES
@given(st.text(alphabet=st.characters(exclude_characters="\x00", codec="utf-8"), max_size=300))
def test_the_sql_tag_is_the_python_tag(db: Db, key: str) -> None:
    """Any text, non-ASCII and overlong included, gives the same tag in both."""
    [expression] = expressions(TAG_EXPRESSION)
    row = db.execute(
        f"SELECT {expression} AS tag FROM (VALUES (%s::text)) AS t(message_key)",
        (key,),
    ).fetchone()
    assert row is not None and row["tag"] == provider_tag(key)


@EXAMPLES
@given(
    account=st.just("platform") | st.from_regex(r"acct_[A-Za-z0-9]{1,20}", fullmatch=True),
    livemode=st.booleans(),
    invoice_id=st.from_regex(r"in_[A-Za-z0-9_]{1,30}", fullmatch=True),
    purpose=st.sampled_from(
        ["invoice-paid", "invoice-paid-copy", "refund-re_1", "credit-note-cn_1"]
    ),
)
def test_the_sql_key_is_the_python_key(
    db: Db, account: str, livemode: bool, invoice_id: str, purpose: str
) -> None:
    [expression] = expressions(KEY_EXPRESSION)
    row = db.execute(
        f"SELECT {expression} AS key FROM (VALUES (%s, %s, %s, %s))"
        " AS t(account, livemode, invoice_id, purpose)",
        (account, livemode, invoice_id, purpose),
    ).fetchone()
    assert row is not None and row["key"] == message_key(account, livemode, invoice_id, purpose)


@pytest.mark.parametrize("path", SQL_FILES, ids=lambda path: path.name)
def test_no_other_spelling_of_a_tag_stands_in_the_sql(path: Path) -> None:
    """A tag derived any other way would escape the property above."""
    text = path.read_text()
    assert text.count("regexp_replace(message_key") == len(TAG_EXPRESSION.findall(text))
