"""``receipts import FILE.csv``: record receipts an earlier system already sent.

Columns ``invoice_id,account,mode,sent_at,provider_id`` with that header.
All or nothing: malformed lines are all reported by number (exit 1) and
nothing is stored. Keys already here are skipped and listed with what they
are; a receipt this system sent that the file says the earlier sender sent
under another provider id was sent twice: listed, and the exit code is 1.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping
from pathlib import Path

from receipts.commands import database_settings
from receipts.db import connect
from receipts.logs import log_fields
from receipts.operations.importing import ImportRejected, import_sent, parse_csv
from receipts.operations.operator_input import InvalidInput
from receipts.operations.review import Decider, operator_name

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE.csv", type=Path, help="the earlier system's log")
    parser.add_argument("--reason", help="recorded with each row (default: imported from FILE)")
    parser.add_argument("--by", help="who imports (default: the OS user)")


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    _settings, database_url = database_settings(environ)
    try:
        decider = Decider(
            performed_by=operator_name(environ, args.by),
            reason=_reason(args.reason, args.file.name),
        )
    except InvalidInput as refused:
        print(f"receipts import: {refused}", file=sys.stderr)
        return 1
    try:
        text = args.file.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        print(f"receipts import: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 1
    except UnicodeDecodeError:
        print(f"receipts import: {args.file} is not UTF-8 text", file=sys.stderr)
        return 1
    try:
        receipts = parse_csv(text)
        with connect(database_url) as conn, conn.transaction():
            report = import_sent(conn, receipts, decider, source=args.file.name)
    except ImportRejected as rejected:
        for problem in rejected.problems:
            print(f"{args.file}: {problem}", file=sys.stderr)
        print(
            f"receipts import: nothing imported ({len(rejected.problems)} problem(s))",
            file=sys.stderr,
        )
        return 1
    for overlap in report.already_here:
        print(f"{args.file}: line {overlap.line}: {overlap.note}")
    twice = report.sent_twice
    log_fields(
        log,
        "import",
        file=args.file.name,
        imported=len(report.imported),
        skipped=len(report.already_here),
        sent_twice=len(twice),
    )
    print(f"imported {len(report.imported)} sent receipt(s), skipped {len(report.already_here)}")
    if twice:
        print(
            f"receipts import: {len(twice)} receipt(s) sent twice, by receipts and by the earlier "
            "sender: the customers above got two (recorded on each; `receipts show KEY`)",
            file=sys.stderr,
        )
        return 1
    return 0


def _reason(given: str | None, file_name: str) -> str:
    """``--reason`` as recorded: default ``imported from FILE``; blank is refused."""
    if given is None:
        return f"imported from {file_name}"
    if not given.strip():
        raise InvalidInput("--reason must say why (it is blank)")
    return given.strip()
