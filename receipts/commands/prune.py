"""``receipts prune``: drop old events, attempts and payloads; keep message keys.

Run it daily from cron. ``--dry-run`` prints what would go and changes nothing.
A ``--keep-keys-days`` below 35 is refused: the key is what stops a late
redelivery from sending the same receipt twice.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping

from receipts.commands import database_settings
from receipts.db import Database
from receipts.logs import log_fields
from receipts.operations.retention import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_KEEP_DETAILS_DAYS,
    DEFAULT_KEEP_KEYS_DAYS,
    Policy,
    PruneCounts,
    RetentionError,
    count_prunable,
    cutoffs,
    prune,
)

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--keep-keys-days",
        type=int,
        default=DEFAULT_KEEP_KEYS_DAYS,
        help=f"keep sent receipts (their message keys) this long; at least 35 "
        f"(default {DEFAULT_KEEP_KEYS_DAYS})",
    )
    parser.add_argument(
        "--keep-details-days",
        type=int,
        default=DEFAULT_KEEP_DETAILS_DAYS,
        help=f"keep events, attempt logs and frozen emails of sent receipts this long "
        f"(default {DEFAULT_KEEP_DETAILS_DAYS})",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        help=f"rows per transaction (default {DEFAULT_BATCH_SIZE})",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would be dropped, change nothing"
    )


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    try:
        policy = Policy(
            keep_keys_days=args.keep_keys_days,
            keep_details_days=args.keep_details_days,
            batch_size=args.batch_size,
        )
    except RetentionError as exc:
        print(f"receipts prune: {exc}", file=sys.stderr)
        return 2
    settings, database_url = database_settings(environ)
    database = Database(
        database_url,
        max_size=1,
        timeout=settings.database_timeout,
        prepared_statements=settings.prepared_statements,
    )
    try:
        if args.dry_run:
            with database.transaction() as conn:
                counts = count_prunable(conn, cutoffs(conn, policy))
            print("dry run, nothing changed; would drop: " + _describe(counts))
            return 0
        counts = prune(database, policy)
    finally:
        database.close()
    log_fields(log, "pruned", logging.INFO, **vars(counts))
    print("dropped: " + _describe(counts))
    return 0


def _describe(counts: PruneCounts) -> str:
    return (
        f"{counts.events} event(s), {counts.delivery_events} delivery event(s), "
        f"{counts.attempts} attempt(s), "
        f"{counts.payloads} frozen email(s), {counts.receipts} sent receipt(s) with their keys, "
        f"{counts.batches} provider batch(es)"
    )
