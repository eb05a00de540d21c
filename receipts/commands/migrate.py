"""``receipts migrate``: apply pending migrations; a no-op when up to date."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from receipts.config import load_settings
from receipts.migrations import migrate


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", help="overrides DATABASE_URL (default: the environment)")


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    url = args.database_url or load_settings(environ, required=("DATABASE_URL",)).database_url
    assert url is not None
    applied = migrate(url)
    if applied:
        print(f"applied {len(applied)} migration(s): {', '.join(applied)}")
    else:
        print("database is up to date")
    return 0
