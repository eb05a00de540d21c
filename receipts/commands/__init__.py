"""Subcommands of the ``receipts`` CLI, one module each."""

from __future__ import annotations

from collections.abc import Mapping

from receipts.config import Settings, load_settings
from receipts.logs import configure_logging


def database_settings(environ: Mapping[str, str]) -> tuple[Settings, str]:
    """Settings of a command that needs DATABASE_URL, with logging configured."""
    settings = load_settings(environ, required=("DATABASE_URL",))
    configure_logging(settings.log_format)
    assert settings.database_url is not None
    return settings, settings.database_url
