"""Subcommands of the ``receipts`` CLI, one module each."""

from __future__ import annotations

import sys
from collections.abc import Mapping

import psycopg

from receipts.config import ConfigError, Settings, load_settings
from receipts.logs import configure_logging

# A privilege the database role lacks is a configuration problem: exit 2, like
# a missing setting.
EXIT_PRIVILEGE = 2


def database_settings(environ: Mapping[str, str]) -> tuple[Settings, str]:
    """Settings of a command that needs DATABASE_URL, with logging configured.

    Without DATABASE_URL, the database of a running ``receipts dev`` is used
    (:func:`receipts.dev.state.with_dev_database` says so on stderr).
    """
    from receipts.dev.state import with_dev_database

    settings = load_settings(with_dev_database(environ), required=("DATABASE_URL",))
    configure_logging(settings.log_format)
    assert settings.database_url is not None
    return settings, settings.database_url


def report_denied(command: str, error: psycopg.Error, environ: Mapping[str, str]) -> int:
    """One line for a statement the database refused: which role lacks which privilege."""
    from receipts.dev.state import with_dev_database
    from receipts.operations.privileges import denied_line

    try:
        database_url = load_settings(with_dev_database(environ)).database_url
    except ConfigError:
        database_url = None
    print(f"receipts {command}: {denied_line(command, error, database_url)}", file=sys.stderr)
    return EXIT_PRIVILEGE
