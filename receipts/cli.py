"""The ``receipts`` command line: one subcommand per operator task.

Each subcommand lives in its own module, which provides ``configure(parser)``
and ``run(args, environ) -> int``. Only the chosen subcommand's module is
imported: ``receipts worker`` on a cron schedule never loads the web stack,
and ``receipts --help`` lists every command from the table below without
importing any of them. A ConfigError or DatabaseUnavailable ends the command
with one line on stderr and a non-zero exit code; so does a privilege the
database role lacks (exit 2, naming the privilege).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from contextlib import suppress
from typing import Protocol, cast

# subcommand name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "migrate": ("receipts.commands.migrate", "apply the sql/ migrations (idempotent)"),
    "worker": (
        "receipts.commands.worker",
        "send ready receipts, then exit (or --loop until SIGTERM)",
    ),
    "dev": (
        "receipts.commands.dev",
        "run everything locally: embedded database, web, worker, mail sink",
    ),
    "replay": (
        "receipts.commands.replay",
        "sign a saved Stripe event and POST it, like Stripe would",
    ),
    "status": ("receipts.commands.status", "counts, ages and anything that needs a person"),
    "show": ("receipts.commands.show", "the incident timeline of one receipt"),
    "review": ("receipts.commands.review", "list and decide receipts that need a person"),
    "import": ("receipts.commands.import_sent", "record receipts an earlier system already sent"),
    "prune": ("receipts.commands.prune", "drop old events, attempts and payloads; keep keys"),
    "backfill": ("receipts.commands.backfill", "ingest invoice.paid events Stripe did not deliver"),
    "reconcile": ("receipts.commands.reconcile", "list (or --apply) paid invoices with no receipt"),
    "preview": ("receipts.commands.preview", "render the receipt an event file would become"),
    "console-user": (
        "receipts.commands.console_user",
        "print a support console user entry (RECEIPTS_CONSOLE_USERS) with a fresh hash",
    ),
    "doctor": ("receipts.commands.doctor", "check all a deploy can get wrong, one line each"),
}


class Subcommand(Protocol):
    def configure(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace, environ: Mapping[str, str]) -> int: ...


def chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line, if it is one of ours.

    The top-level parser has no option that takes a value, so the command is
    the first argument that is not an option, exactly as argparse reads it.
    """
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in SUBCOMMANDS else None
    return None


def build_parser(configured: str | None = None) -> argparse.ArgumentParser:
    """The parser for every subcommand; only ``configured`` gets its options
    (and only its module is imported). The others are listed by name and help."""
    parser = argparse.ArgumentParser(
        prog="receipts",
        description="Exactly one 'your invoice is paid' email per paid Stripe invoice.",
    )
    parser.add_argument("--version", action="version", version=f"receipts {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub = commands.add_parser(name, help=help_text, description=help_text)
        if name == configured:
            module = cast(Subcommand, importlib.import_module(module_name))
            module.configure(sub)
            sub.set_defaults(handler=module.run)
    return parser


def _version() -> str:
    """The installed distribution's version (pyproject.toml), as pip knows it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("receipts")
    except PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    try:
        try:
            code = _run(argv, environ)
        finally:  # also after argparse's --help, which exits
            sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`receipts status | head -1`): stop quietly, as
        # cat and grep do, rather than with a traceback.
        _discard_stdout()
        return 1
    return code


def _discard_stdout() -> None:
    """Point standard output at /dev/null, so the flush at exit cannot fail again."""
    with suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _run(argv: Sequence[str] | None, environ: Mapping[str, str] | None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(chosen_command(arguments)).parse_args(arguments)
    # Imported after parsing: `--help` and a bad command line need neither.
    import psycopg

    from receipts.config import ConfigError
    from receipts.db import DatabaseUnavailable

    try:
        code: int = args.handler(args, os.environ if environ is None else environ)
    except ConfigError as error:
        print(f"receipts: configuration error: {error}", file=sys.stderr)
        return 2
    except DatabaseUnavailable as error:
        print(f"receipts: database unavailable: {error}", file=sys.stderr)
        return 3
    except psycopg.errors.UndefinedTable as error:
        from receipts.db import not_migrated

        print(f"receipts: {not_migrated(error)}", file=sys.stderr)
        return 3
    except psycopg.errors.InsufficientPrivilege as error:
        from receipts.commands import report_denied

        return report_denied(args.command, error, os.environ if environ is None else environ)
    return code


if __name__ == "__main__":
    sys.exit(main())
