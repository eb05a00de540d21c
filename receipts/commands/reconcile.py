"""``receipts reconcile --since DURATION [--apply] [--account acct_…]``: find missed receipts.

Lists every paid invoice created within the window that has no receipt row
(invoice id, number, amount, paid date). Meant to run daily from cron;
``receipts status`` and ``/metrics`` report the last run. Needs STRIPE_API_KEY.

Exit codes: 0 nothing missing, or ``--apply`` ingested every missing one;
1 receipts are missing (without ``--apply``), some could not be ingested, or
Stripe's API stayed unavailable; 2 configuration error, or Stripe refused the
key; 3 database unavailable.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping

from receipts.db import Database
from receipts.formatting import utc
from receipts.operations.reconcile import MissingInvoice, Reconcile, ReconcileReport
from receipts.operations.stripe_sync import account_id, duration, stripe_setup
from receipts.receipt.money import format_amount
from receipts.stripe_api.client import ApiError, ApiRefused


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--since",
        type=duration,
        required=True,
        metavar="DURATION",
        help="paid invoices created within this long ago: 24h, 7d, 35d",
    )
    parser.add_argument(
        "--apply",
        action="store_true",
        help="ingest the missing ones (same key and email as their webhook would give)",
    )
    parser.add_argument(
        "--account",
        type=account_id,
        action="append",
        default=[],
        metavar="ACCT",
        help="also a Connect account's invoices (repeatable)",
    )


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    setup = stripe_setup(environ, "reconcile", derives=args.apply)
    since = int(time.time()) - args.since
    print(f"receipts reconcile: paid invoices created since {utc(since)}, "
          f"for {', '.join(['platform', *args.account])}")  # fmt: skip
    database = Database(
        setup.database_url,
        max_size=2,
        timeout=setup.settings.database_timeout,
        prepared_statements=setup.settings.prepared_statements,
    )
    reconcile = Reconcile(database, setup.deriver, progress=_progress)
    try:
        report = reconcile.run(since=since, accounts=args.account, apply=args.apply)
    except ApiError as exc:
        print(f"receipts reconcile: stopped: Stripe API: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ApiRefused) else 1
    finally:
        database.close()
    _print(report, args.apply)
    if report.result in ("clean", "applied"):
        return 0
    return 1


def _progress(line: str) -> None:
    print(f"receipts reconcile: {line}", file=sys.stderr, flush=True)


def _line(missing: MissingInvoice) -> str:
    invoice = missing.invoice
    number = invoice.get("number") or "-"
    amount = invoice.get("amount_paid")
    currency = invoice.get("currency")
    shown = (
        format_amount(amount, currency, "en_US")
        if isinstance(amount, int) and isinstance(currency, str)
        else "-"
    )
    return (f"{missing.invoice_id}  {number}  {shown}  paid {utc(missing.paid_at)}  "
            f"{missing.scope.account}")  # fmt: skip


def _print(report: ReconcileReport, apply: bool) -> None:
    applied = {missing.key: result for missing, result in report.applied}
    for missing in report.missing:
        result = applied.get(missing.key)
        if result is None:
            print(f"  missing  {_line(missing)}")
        else:
            print(f"  ingested {_line(missing)}  {result.outcome}  {result.message_key}")
    for missing, why in report.not_applied:
        print(f"  FAILED   {missing.invoice_id}: {why}")
    summary = (f"receipts reconcile: {report.paid_invoices} paid invoice(s), "
               f"{len(report.missing)} without a receipt row")  # fmt: skip
    if apply:
        summary += f", {len(report.applied)} ingested"
    elif report.missing:
        summary += " (run with --apply to queue them)"
    print(summary)
