"""``receipts migrate``: apply pending migrations; a no-op when up to date."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from receipts.config import load_settings
from receipts.dev.state import with_dev_database
from receipts.logs import configure_logging
from receipts.migrations import migrate


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", help="overrides DATABASE_URL (default: the environment)")


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    if not args.database_url:
        environ = with_dev_database(environ)
    settings = load_settings(environ, required=() if args.database_url else ("DATABASE_URL",))
    configure_logging(settings.log_format)
    url = args.database_url or settings.database_url
    assert url is not None
    applied = migrate(url)
    if applied:
        print(f"applied {len(applied)} migration(s): {', '.join(applied)}")
    else:
        print("database is up to date")
    return 0
