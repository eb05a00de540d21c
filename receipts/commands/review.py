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
from receipts.db import Connection, connect
from receipts.formatting import duration, iso, money
from receipts.logs import log_fields
from receipts.operations.operator_input import ECHO_LIMIT, InvalidInput, parse_sent_at, shown
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

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="receipts waiting for a decision")
    listing.add_argument("--reason", help="only this review reason (e.g. attempts_exhausted)")
    listing.add_argument("--all", action="store_true", help="include dismissed receipts")
    listing.add_argument("--json", action="store_true", help="print one JSON document")

    found = _decision(actions, "resolve", "it was sent: record the provider's id, mark sent")
    found.add_argument("--provider-id", required=True, help="the email's id in the provider's logs")
    found.add_argument(
        "--sent-at",
        help="when it was sent, ISO 8601 with offset, 2000-01-01 to now (default now)",
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


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    settings, database_url = database_settings(environ)
    if args.action == "list":
        with connect(database_url) as conn:
            rows = list_review(conn, reason=args.reason, include_dismissed=args.all)
        _print_list(rows, as_json=args.json)
        return 0
    try:
        _check_decision_arguments(args)
        decider = Decider(performed_by=operator_name(environ, args.by), reason=args.reason.strip())
        sent_at = _sent_at(args)
    except InvalidInput as problem:
        print(f"receipts review {args.action}: {problem}", file=sys.stderr)
        return 1
    try:
        with connect(database_url) as conn, conn.transaction():
            message = _decide(conn, args, decider, settings.retry_cutoff_hours, sent_at)
    except Refused as refused:
        print(f"receipts review {args.action}: refused: {refused}", file=sys.stderr)
        print("nothing was changed", file=sys.stderr)
        return 1
    log_fields(log, "operator decision", action=args.action, key=args.key, by=decider.performed_by)
    print(message)
    return 0


def _check_decision_arguments(args: argparse.Namespace) -> None:
    """InvalidInput naming the first argument that cannot be used."""
    if not args.reason.strip():
        raise InvalidInput("--reason must say why")
    if not names_message_key(args.key):
        short = len(args.key) <= ECHO_LIMIT and args.key.isprintable()
        raise InvalidInput(
            f"{shown(args.key)} is not a message key (like platform/live/in_…/invoice-paid); "
            f"`receipts show {args.key if short else 'INVOICE_ID'}` lists the keys of an invoice"
        )
    if args.action == "resolve" and not args.provider_id.strip():
        raise InvalidInput("--provider-id must not be empty")


def _sent_at(args: argparse.Namespace) -> datetime | None:
    """``resolve --sent-at``, between 2000-01-01 and now; None means now."""
    if args.action != "resolve" or args.sent_at is None:
        return None
    return parse_sent_at(args.sent_at, label="--sent-at")


def _decide(
    conn: Connection,
    args: argparse.Namespace,
    decider: Decider,
    retry_cutoff_hours: float,
    sent_at: datetime | None,
) -> str:
    key = args.key
    if args.action == "resolve":
        resolve(conn, key, decider, provider_id=args.provider_id.strip(), sent_at=sent_at)
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
        print(json.dumps([_list_entry(row) for row in rows], indent=2, default=str))
        return
    if not rows:
        print("no receipts in review")
        return
    for row in rows:
        print(
            f"{row['message_key']}  {row['review_reason']}  age {duration(row['age_seconds'])}  "
            f"attempts {row['attempts']}{_list_flags(row)}"
        )
        print(f"    {_invoice_line(row)}")
        said = _provider_said(row)
        if said:
            print(f"    provider said: {said}")
        elif row["last_error"]:
            print(f"    last error: {row['last_error']}")
        for line in _evidence_offer(row):
            print(line)
    print(f"{len(rows)} receipt(s)")


def _invoice_line(row: dict[str, Any]) -> str:
    """``invoice ACME-0102  $19.99  to jenny@example.com``: what support knows it by."""
    parts = [row["invoice_number"] or row["invoice_id"], money(row["amount"], row["currency"])]
    customer = row["customer_email"] or "no address"
    return f"invoice {'  '.join(part for part in parts if part)}  to {customer}"


def _list_flags(row: dict[str, Any]) -> str:
    flags = []
    if not row["has_email"]:
        flags.append("no email could be made")
    if row["abandoned_attempt"]:
        flags.append("has an attempt that never finished")
    if row["provider_reported_send"]:
        flags.append("the provider reported sending it: see `receipts show`")
    return f"  [{'; '.join(flags)}]" if flags else ""


def _provider_said(row: dict[str, Any]) -> str | None:
    """``HTTP 422 validation_error: "Invalid `to` field…"``: the provider's last answer."""
    parts = []
    if row["last_http_status"] is not None:
        parts.append(f"HTTP {row['last_http_status']}")
    if row["last_provider_error"]:
        parts.append(row["last_provider_error"])
    said = " ".join(parts)
    if row["last_provider_message"]:
        said += f": {json.dumps(row['last_provider_message'], ensure_ascii=False)}"
    return said or None


def _list_entry(row: dict[str, Any]) -> dict[str, Any]:
    """The JSON of one row: what the text shows, under stable names."""
    return {
        "message_key": row["message_key"],
        "review_reason": row["review_reason"],
        "age_seconds": round(row["age_seconds"], 1),
        "attempts": row["attempts"],
        "invoice_id": row["invoice_id"],
        "invoice_number": row["invoice_number"],
        "customer_email": row["customer_email"],
        "amount": row["amount"],
        "currency": row["currency"],
        "amount_display": money(row["amount"], row["currency"]),
        "last_error": row["last_error"],
        "provider_http_status": row["last_http_status"],
        "provider_error": row["last_provider_error"],
        "provider_message": row["last_provider_message"],
        "has_email": row["has_email"],
        "abandoned_attempt": row["abandoned_attempt"],
        "provider_reported_send": row["provider_reported_send"],
        "evidence": [
            {"email_id": send["email_id"], "accepted_at": str(send["accepted_at"])}
            for send in row["evidence"]
        ],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "first_attempt_at": row["first_attempt_at"],
    }
