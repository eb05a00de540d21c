"""``receipts review list|resolve|retry|resend|dismiss``: decide what a person must.

Every decision takes ``--reason`` and records who (``--by``, default the OS
user), when and why in ``operator_actions``. A decision is a guarded
transition (docs/architecture.md, "Operator decisions"): one that does not
apply to the receipt's state, or would risk a second email the person did not
accept (``--accept-duplicate-risk``), or acts on a dismissed receipt without
``--undo-dismiss``, is refused with exit 1, says what changed and when, and
changes nothing.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping
from datetime import datetime

from receipts.commands import database_settings
from receipts.commands.review_list import print_list
from receipts.db import Connection, connect
from receipts.formatting import iso
from receipts.logs import log_fields
from receipts.operations.duplicate_risk import RISK_FLAG, UNDO_DISMISS_FLAG
from receipts.operations.operator_input import ECHO_LIMIT, InvalidInput, parse_sent_at, shown
from receipts.operations.resending import Resent, resend
from receipts.operations.review import Decider, Refused, count_settled, list_review, operator_name
from receipts.operations.review_decisions import dismiss, resolve, retry
from receipts.operations.timeline import names_message_key

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="receipts waiting for a decision")
    listing.add_argument("--reason", help="only this review reason (e.g. attempts_exhausted)")
    listing.add_argument(
        "--all", action="store_true", help="include settled receipts (dismissed, resent)"
    )
    listing.add_argument("--json", action="store_true", help="print one JSON document")

    found = _decision(actions, "resolve", "it was sent: record the provider's id, mark sent")
    found.add_argument("--provider-id", required=True, help="the email's id in the provider's logs")
    found.add_argument(
        "--sent-at",
        help="when it was sent, ISO 8601 with offset, 2000-01-01 to now (default now)",
    )
    _risk_flag(found, "another email of this receipt was sent too, and you want that recorded")
    _undo_flag(found)
    again = _decision(actions, "retry", "send it again under the same key, fresh retry window")
    _risk_flag(
        again,
        "you checked the provider's logs: retry even though an earlier attempt, or another "
        "email of this receipt (a resend), may have reached the customer",
    )
    _undo_flag(again)
    copy = _decision(actions, "resend", "send a deliberate new email under a new key")
    copy.add_argument(
        "--to",
        metavar="ADDRESS",
        help="send it to this address instead (also for a receipt whose invoice had none)",
    )
    _risk_flag(copy, "the customer may already have one (it was sent, or may have been)")
    _undo_flag(copy)
    _decision(actions, "dismiss", "no email will be sent for it (final)")


def _decision(
    actions: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str
) -> argparse.ArgumentParser:
    parser = actions.add_parser(name, help=help_text, description=help_text)
    parser.add_argument("key", metavar="KEY", help="the message key (see `receipts show`)")
    parser.add_argument("--reason", required=True, help="why: recorded with the decision")
    parser.add_argument("--by", default=None, help="who decides (default: the OS user)")
    return parser


def _risk_flag(parser: argparse.ArgumentParser, when: str) -> None:
    parser.add_argument(RISK_FLAG, action="store_true", help=f"go ahead although {when}")


def _undo_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        UNDO_DISMISS_FLAG,
        action="store_true",
        help="the receipt was dismissed: undo that (recorded with the decision)",
    )


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    settings, database_url = database_settings(environ)
    if args.action == "list":
        with connect(database_url) as conn:
            rows = list_review(conn, reason=args.reason, include_settled=args.all)
            settled = count_settled(conn, reason=args.reason)
        print_list(rows, settled, as_json=args.json)
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
    if args.action == "resend" and args.to is not None and not args.to.strip():
        raise InvalidInput("--to must be an email address (it is blank)")


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
        provider_id = args.provider_id.strip()
        resolve(
            conn,
            key,
            decider,
            provider_id=provider_id,
            sent_at=sent_at,
            accept_duplicate_risk=args.accept_duplicate_risk,
            undo_dismiss=args.undo_dismiss,
        )
        return f"{key}: marked sent (provider id {provider_id})"
    if args.action == "retry":
        window = retry(
            conn,
            key,
            decider,
            retry_cutoff_hours=retry_cutoff_hours,
            accept_duplicate_risk=args.accept_duplicate_risk,
            undo_dismiss=args.undo_dismiss,
        )
        note = (
            f"; retry window counts from the uncertain attempt at {iso(window)}" if window else ""
        )
        return f"{key}: back to pending{note}"
    if args.action == "resend":
        resent = resend(
            conn,
            key,
            decider,
            to=args.to.strip() if args.to is not None else None,
            accept_duplicate_risk=args.accept_duplicate_risk,
            undo_dismiss=args.undo_dismiss,
        )
        return _resent_message(key, resent)
    dismiss(conn, key, decider)
    return f"{key}: dismissed, no email will be sent for it"


def _resent_message(key: str, resent: Resent) -> str:
    """``KEY: resend queued as KEY/resend-1 to ADDRESS; …``: what was queued and settled."""
    lines = [f"{key}: resend queued as {resent.new_key} to {resent.recipient}"]
    if resent.rendered_at_first_claim:
        lines.append("  its email is made from the stored invoice when a worker first takes it")
    if resent.settled:
        lines.append(f"  settled, needing no decision now: {', '.join(resent.settled)}")
    return "\n".join(lines)
