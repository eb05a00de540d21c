"""``receipts backfill --since DURATION [--all] [--account acct_…]``: ingest lost events.

Pages through Stripe's Events API for ``invoice.paid`` events created within
the window (``72h``, ``7d``; Stripe keeps events for 30 days), by default only
those whose delivery did not succeed, and ingests each through the webhook's
path. Prints every event and what it became, a progress line on long runs
(stderr) and a summary. Needs STRIPE_API_KEY.

Exit codes: 0 done; 1 Stripe's API stayed unavailable (what was done stays
done: run it again); 2 configuration error, or Stripe refused the key;
3 database unavailable.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping

from receipts.db import Database
from receipts.formatting import utc
from receipts.operations.backfill import ALREADY_STORED, Backfill, BackfillReport, EventOutcome
from receipts.operations.stripe_sync import account_id, duration, stripe_setup
from receipts.stripe_api.client import ApiError, ApiRefused

STRIPE_EVENT_RETENTION_SECONDS = 30 * 86400
OUTCOMES = ("queued", "duplicate", "review", "ignored", "conflict", ALREADY_STORED, "malformed")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--since",
        type=duration,
        required=True,
        metavar="DURATION",
        help="events created within this long ago: 72h, 7d (at most 30d)",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="also events Stripe delivered successfully (default: only undelivered ones)",
    )
    parser.add_argument(
        "--account",
        type=account_id,
        action="append",
        default=[],
        metavar="ACCT",
        help="also a Connect account's events (repeatable)",
    )


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    if args.since > STRIPE_EVENT_RETENTION_SECONDS:
        print("receipts backfill: --since is at most 30d: Stripe keeps events for 30 days",
              file=sys.stderr)  # fmt: skip
        return 2
    setup = stripe_setup(environ, "backfill", derives=True)
    since = int(time.time()) - args.since
    which = "every" if args.all else "undelivered"
    print(f"receipts backfill: {which} invoice.paid events created since {utc(since)}, "
          f"for {', '.join(['platform', *args.account])}")  # fmt: skip
    database = Database(
        setup.database_url,
        max_size=2,
        timeout=setup.settings.database_timeout,
        prepared_statements=setup.settings.prepared_statements,
    )
    backfill = Backfill(database, setup.deriver, on_event=_print_event, progress=_progress)
    try:
        backfill.run(since=since, accounts=args.account, include_delivered=args.all)
    except ApiError as exc:
        _print_summary(backfill.report, cut_short=True)
        print(f"receipts backfill: stopped: Stripe API: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ApiRefused) else 1
    finally:
        database.close()
    _print_summary(backfill.report)
    return 0


def _print_event(found: EventOutcome) -> None:
    detail = f" ({found.detail})" if found.detail else ""
    print(f"  {found.event_id}  {found.invoice_id or '-'}  {found.outcome}{detail}  "
          f"{found.message_key or '-'}", flush=True)  # fmt: skip


def _progress(line: str) -> None:
    print(f"receipts backfill: {line}", file=sys.stderr, flush=True)


def _print_summary(report: BackfillReport, *, cut_short: bool = False) -> None:
    thin = report.thin
    if thin is not None and (thin.outcomes or thin.stopped):
        resolved = ", ".join(f"{name} {n}" for name, n in sorted(thin.outcomes.items()))
        stopped = f"; stopped: {thin.stopped}" if thin.stopped else ""
        print(f"receipts backfill: pending thin notifications: {resolved or 'none resolved'}"
              f"{stopped}")  # fmt: skip
    counts = ", ".join(f"{name} {report.outcomes[name]}" for name in OUTCOMES)
    if cut_short:
        # Not "0 found": the events after the failure were never read.
        print(f"receipts backfill: {report.found} found before the run stopped, the rest "
              f"not read (run it again): {counts}")  # fmt: skip
        return
    print(f"receipts backfill: {report.found} found: {counts}")
