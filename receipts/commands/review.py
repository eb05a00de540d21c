"""``receipts review list|resolve|retry|resend|dismiss``: decide what a person must.

Every decision takes ``--reason`` and records who (``--by``, default the OS
user), when and why in ``operator_actions``. A decision that does not apply to
the receipt's state is refused with exit 1 and changes nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from receipts.commands import database_settings
from receipts.commands.formatting import iso
from receipts.db import Connection, connect
from receipts.logs import log_fields
from receipts.operations.resending import resend
from receipts.operations.review import (
    Decider,
    Refused,
    dismiss,
    list_review,
    operator_name,
    resolve,
    retry,
)
from receipts.operations.timeline import names_message_key

log = logging.getLogger("receipts.operations.review")


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="receipts waiting for a decision")
    listing.add_argument("--reason", help="only this review reason (e.g. attempts_exhausted)")
    listing.add_argument("--all", action="store_true", help="include dismissed receipts")
    listing.add_argument("--json", action="store_true", help="print one JSON document")

    found = _decision(actions, "resolve", "it was sent: record the provider's id, mark sent")
    found.add_argument("--provider-id", required=True, help="the email's id in the provider's logs")
    found.add_argument(
        "--sent-at", type=_timestamp, help="when it was sent, ISO 8601 with offset (default now)"
    )
    again = _decision(actions, "retry", "send it again under the same key, fresh retry window")
    again.add_argument(
        "--accept-duplicate-risk",
        action="store_true",
        help="you checked the provider's logs: retry with a fresh window even though an "
        "earlier attempt may have reached the provider",
    )
    copy = _decision(actions, "resend", "send a deliberate second email under a new key")
    copy.add_argument("--to", help="send the copy to this address instead")
    _decision(actions, "dismiss", "no email will be sent for it")


def _decision(
    actions: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str
) -> argparse.ArgumentParser:
    parser = actions.add_parser(name, help=help_text, description=help_text)
    parser.add_argument("key", metavar="KEY", help="the message key (see `receipts show`)")
    parser.add_argument("--reason", required=True, help="why: recorded with the decision")
    parser.add_argument("--by", default=None, help="who decides (default: the OS user)")
    return parser


def _timestamp(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no UTC offset (add Z or +00:00)")
    return value


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    settings, database_url = database_settings(environ)
    if args.action == "list":
        with connect(database_url) as conn:
            rows = list_review(conn, reason=args.reason, include_dismissed=args.all)
        _print_list(rows, as_json=args.json)
        return 0
    problem = _check_decision_arguments(args)
    if problem:
        print(f"receipts review {args.action}: {problem}", file=sys.stderr)
        return 1
    decider = Decider(performed_by=args.by or operator_name(environ), reason=args.reason.strip())
    try:
        with connect(database_url) as conn, conn.transaction():
            message = _decide(conn, args, decider, settings.retry_cutoff_hours)
    except Refused as refused:
        print(f"receipts review {args.action}: refused: {refused}", file=sys.stderr)
        print("nothing was changed", file=sys.stderr)
        return 1
    log_fields(log, "operator decision", action=args.action, key=args.key, by=decider.performed_by)
    print(message)
    return 0


def _check_decision_arguments(args: argparse.Namespace) -> str | None:
    if not args.reason.strip():
        return "--reason must say why"
    if not names_message_key(args.key):
        return (
            f"{args.key!r} is not a message key (like platform/live/in_…/invoice-paid); "
            f"`receipts show {args.key}` lists the keys of an invoice"
        )
    if args.action == "resolve" and not args.provider_id.strip():
        return "--provider-id must not be empty"
    return None


def _decide(
    conn: Connection, args: argparse.Namespace, decider: Decider, retry_cutoff_hours: float
) -> str:
    key = args.key
    if args.action == "resolve":
        resolve(conn, key, decider, provider_id=args.provider_id.strip(), sent_at=args.sent_at)
        return f"{key}: marked sent (provider id {args.provider_id.strip()})"
    if args.action == "retry":
        window = retry(
            conn,
            key,
            decider,
            retry_cutoff_hours=retry_cutoff_hours,
            accept_duplicate_risk=args.accept_duplicate_risk,
        )
        note = (
            f"; retry window counts from the uncertain attempt at {iso(window)}" if window else ""
        )
        return f"{key}: back to pending{note}"
    if args.action == "resend":
        new_key = resend(conn, key, decider, to=args.to)
        return f"{key}: resend queued as {new_key}"
    dismiss(conn, key, decider)
    return f"{key}: dismissed, no email will be sent"


def _evidence_offer(row: dict[str, Any]) -> list[str]:
    """Resend reported sending it: offer to resolve it with the email's id."""
    lines = []
    for send in row["evidence"]:
        email_id, accepted_at = send["email_id"], iso(send["accepted_at"])
        lines += [
            f"    Resend accepted it at {accepted_at} as email {email_id}; resolve with this id?",
            f"      receipts review resolve {row['message_key']} --provider-id {email_id} "
            f"--sent-at {accepted_at} --reason 'Resend reported it sent'",
        ]
    if len(row["evidence"]) > 1:
        lines.append("    ! more than one email carries its tag: check Resend's logs for both")
    return lines


def _print_list(rows: list[dict[str, Any]], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return
    if not rows:
        print("no receipts in review")
        return
    for row in rows:
        flags = []
        if not row["has_email"]:
            flags.append("no email could be made")
        if row["abandoned_attempt"]:
            flags.append("has an attempt that never finished")
        extra = f"  [{'; '.join(flags)}]" if flags else ""
        print(
            f"{row['message_key']}  {row['review_reason']}  attempts {row['attempts']}  "
            f"since {iso(row['updated_at'])}{extra}"
        )
        if row["last_error"]:
            print(f"    last error: {row['last_error']}")
        for line in _evidence_offer(row):
            print(line)
    print(f"{len(rows)} receipt(s)")
