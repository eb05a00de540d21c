"""``receipts console-user NAME --role viewer|operator [--password-stdin]``.

Prints one ``RECEIPTS_CONSOLE_USERS`` entry, ``NAME:ROLE:HASH``, with a fresh
argon2id hash of the password (:mod:`receipts.passwords`). The password is
asked for twice at a prompt, or read from the first line of standard input
with ``--password-stdin`` (for a password manager's pipe); it is never an
argument, which would land in the shell's history and the process list.
Needs no database and no other setting.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Mapping

from receipts.console_users import USERS_VARIABLE, Role, name_problem
from receipts.passwords import hash_password, password_problem


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="the user's name, recorded with decisions")
    parser.add_argument(
        "--role",
        required=True,
        choices=[role.value for role in Role],
        help="viewer: search and read; operator: also take review decisions",
    )
    parser.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from the first line of standard input instead of a prompt",
    )


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    problem = name_problem(args.name)
    if problem is not None:
        return _fail(f"{args.name!r}: {problem}")
    password = _read_password(args.password_stdin)
    if password is None:
        return 1
    problem = password_problem(password)
    if problem is not None:
        return _fail(problem)
    print(f"{args.name}:{args.role}:{hash_password(password)}")
    print(
        f"add this entry to {USERS_VARIABLE} (entries separated by ';'); "
        "RECEIPTS_CONSOLE_SECRET must be set too",
        file=sys.stderr,
    )
    return 0


def _read_password(from_stdin: bool) -> str | None:
    if from_stdin:
        line = sys.stdin.readline()
        if not line:
            _fail("--password-stdin: standard input is empty")
            return None
        return line.removesuffix("\n").removesuffix("\r")
    if not sys.stdin.isatty():
        _fail("no terminal to ask for the password: pipe it in with --password-stdin")
        return None
    try:
        first = getpass.getpass("password: ")
        again = getpass.getpass("the same password again: ")
    except (EOFError, KeyboardInterrupt):
        print(file=sys.stderr)
        _fail("no password given")
        return None
    if first != again:
        _fail("the two passwords differ; nothing was printed")
        return None
    return first


def _fail(message: str) -> int:
    print(f"receipts console-user: {message}", file=sys.stderr)
    return 1
