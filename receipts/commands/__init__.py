"""Subcommands of the ``receipts`` CLI, one module each."""
