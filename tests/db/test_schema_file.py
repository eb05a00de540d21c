"""sql/schema.sql is the schema the migrations leave: one file a newcomer can read.

A database built from the migrations and one built from schema.sql must have
the same catalog: every column (in order, with type, default and NOT NULL),
constraint, index, trigger and function. A migration that is not written into
schema.sql too, or an edit of schema.sql no migration makes, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

SCHEMA = Path(__file__).resolve().parents[2] / "sql" / "schema.sql"

CATALOG = {
    "columns": """
        SELECT c.relname AS table, a.attnum AS position, a.attname AS column,
               format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null,
               pg_get_expr(d.adbin, d.adrelid) AS default
          FROM pg_attribute a
          JOIN pg_class c ON c.oid = a.attrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace
          LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE n.nspname = 'public' AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
         ORDER BY 1, 2""",
    "constraints": """
        SELECT c.relname AS table, k.conname AS name, pg_get_constraintdef(k.oid) AS definition
          FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' ORDER BY 1, 2""",
    "indexes": """
        SELECT indexname AS name, indexdef AS definition
          FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1""",
    "triggers": """
        SELECT t.tgname AS name, pg_get_triggerdef(t.oid) AS definition
          FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' AND NOT t.tgisinternal ORDER BY 1""",
    "functions": """
        SELECT p.proname AS name, pg_get_functiondef(p.oid) AS definition
          FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'public' ORDER BY 1""",
    "row_security": """
        SELECT c.relname AS table, c.relrowsecurity AS enabled
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY 1""",
}


def catalog(url: str) -> dict[str, list[dict[str, Any]]]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        found = {part: conn.execute(query).fetchall() for part, query in CATALOG.items()}
    # A constraint added NOT VALID by a migration (so it did not scan a big
    # table) is the same rule as one written into a fresh schema.
    for row in found["constraints"]:
        row["definition"] = re.sub(r" NOT VALID\Z", "", row["definition"])
    return found


def test_schema_sql_is_what_the_migrations_leave(
    direct_database_url: str, empty_database_url: str
) -> None:
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute(SCHEMA.read_text(encoding="utf-8").encode())
    from_migrations, from_schema = catalog(direct_database_url), catalog(empty_database_url)
    for part in CATALOG:
        assert from_schema[part] == from_migrations[part], part
