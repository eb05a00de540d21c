"""Stripe's side in ``receipts status`` and ``/metrics``: waiting thin events, the last reconcile.

What only a look at the database shows: thin notifications still
waiting for their invoice (Stripe's API was unreachable, or refused our key),
refund and credit-note events recorded without an email because no
``STRIPE_API_KEY`` was set, and what the last ``receipts reconcile`` found.
Each reads one small index.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from receipts import queries
from receipts.db import Connection, Database, DatabaseUnavailable, describe_error
from receipts.formatting import duration
from receipts.logs import log_fields

log = logging.getLogger(__name__)

# What to do about refund and credit-note events recorded without STRIPE_API_KEY.
WITHOUT_KEY_ADVICE = (
    "set STRIPE_API_KEY (read access to charges, refunds, credit notes, invoices and invoice "
    "payments), then resend those events from the Stripe Dashboard or with `receipts replay`"
)

# A reconcile run older than this no longer says anything about today.
RECONCILE_STALE_SECONDS = 36 * 3600


@dataclass(frozen=True, kw_only=True)
class StripeStatus:
    thin_pending: int
    thin_oldest_age_seconds: float | None
    thin_oldest_error: str | None
    last_reconcile: dict[str, Any] | None
    # Refund and credit-note events recorded without an email for want of STRIPE_API_KEY.
    waiting_for_api_key_30d: int = 0
    waiting_for_api_key_24h: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "thin_events_pending": self.thin_pending,
            "thin_events_oldest_pending_age_seconds": self.thin_oldest_age_seconds,
            "thin_events_oldest_error": self.thin_oldest_error,
            "last_reconcile": self.last_reconcile,
            "events_waiting_for_api_key_30d": self.waiting_for_api_key_30d,
            "events_waiting_for_api_key_24h": self.waiting_for_api_key_24h,
        }


def read_stripe_status(conn: Connection) -> StripeStatus:
    waiting = conn.execute(_Q["thin_events_waiting"]).fetchone()
    last = conn.execute(_Q["last_reconcile_run"]).fetchone()
    keyless = conn.execute(_Q["events_waiting_for_api_key"]).fetchone()
    return StripeStatus(
        waiting_for_api_key_30d=keyless["month"] if keyless else 0,
        waiting_for_api_key_24h=keyless["day"] if keyless else 0,
        thin_pending=waiting["pending"] if waiting else 0,
        thin_oldest_age_seconds=waiting["oldest_age_seconds"] if waiting else None,
        thin_oldest_error=waiting["oldest_error"] if waiting else None,
        last_reconcile=last,
    )


def stripe_problems(status: StripeStatus, max_pending_age: float) -> list[str]:
    """What needs a person: long-waiting thin events, a reconcile that found or failed."""
    problems = []
    oldest = status.thin_oldest_age_seconds
    if status.thin_pending and oldest is not None and oldest > max_pending_age:
        problems.append(
            f"{status.thin_pending} thin event notification(s) wait for their invoice, the "
            f"oldest for {duration(oldest)} ({status.thin_oldest_error or 'not fetched yet'}): "
            "check STRIPE_API_KEY, then `receipts backfill --since 72h`"
        )
    if status.waiting_for_api_key_24h:
        problems.append(
            f"{status.waiting_for_api_key_24h} refund or credit-note event(s) in 24 h made no "
            f"email: {WITHOUT_KEY_ADVICE}"
        )
    last = status.last_reconcile
    if last is not None and last["result"] == "missing":
        problems.append(
            f"the last reconcile found {last['missing']} paid invoice(s) without a receipt: "
            "`receipts reconcile --since 7d --apply`"
        )
    if last is not None and last["result"] == "failed":
        problems.append(f"the last reconcile failed: {last['error']}")
    return problems


def stripe_lines(status: StripeStatus) -> list[str]:
    if status.thin_pending:
        thin = (
            f"thin events     {status.thin_pending} waiting for the Stripe API, oldest "
            f"{duration(status.thin_oldest_age_seconds)}"
        )
    else:
        thin = "thin events     none waiting for the Stripe API"
    lines = [thin]
    if status.waiting_for_api_key_30d:
        lines.append(
            f"refunds         {status.waiting_for_api_key_30d} refund/credit-note event(s) in "
            f"30 days wait for STRIPE_API_KEY: {WITHOUT_KEY_ADVICE}"
        )
    last = status.last_reconcile
    if last is None:
        return [*lines, "reconcile       never run (`receipts reconcile --since 7d`, daily)"]
    stale = " STALE" if last["age_seconds"] > RECONCILE_STALE_SECONDS else ""
    return [
        *lines,
        f"reconcile       {last['result']}{stale} {duration(last['age_seconds'])} ago: "
        f"{last['paid_invoices']} paid, {last['missing']} missing, {last['applied']} ingested",
    ]


class StripeCollector(Collector):
    """Gauges for /metrics: thin events waiting, and the last reconcile run."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        try:
            with self._database.transaction() as conn:
                conn.execute(_Q["metrics_statement_timeout"])
                status = read_stripe_status(conn)
        except (DatabaseUnavailable, psycopg.Error) as exc:
            log_fields(log, "metrics: stripe status not readable", logging.WARNING,
                       reason=describe_error(exc))  # fmt: skip
            return []
        found: list[Metric] = [
            GaugeMetricFamily(
                "receipts_thin_events_pending",
                "Thin event notifications waiting for their invoice to be fetched.",
                value=status.thin_pending,
            ),
            GaugeMetricFamily(
                "receipts_thin_events_oldest_pending_age_seconds",
                "How long the oldest waiting thin event notification has waited (0 when none).",
                value=status.thin_oldest_age_seconds or 0.0,
            ),
        ]
        last = status.last_reconcile
        if last is not None:
            found += _reconcile_metrics(last)
        return found


def _reconcile_metrics(last: dict[str, Any]) -> list[Metric]:
    results = GaugeMetricFamily(
        "receipts_reconcile_last_result",
        "1 for the result of the last reconcile run (clean, missing, applied, failed).",
        labels=["result"],
    )
    for result in ("clean", "missing", "applied", "failed"):
        results.add_metric([result], 1.0 if last["result"] == result else 0.0)
    return [
        GaugeMetricFamily(
            "receipts_reconcile_last_run_timestamp_seconds",
            "When the last reconcile run finished (absent until one ran).",
            value=last["finished_at"].timestamp(),
        ),
        GaugeMetricFamily(
            "receipts_reconcile_missing_invoices",
            "Paid invoices without a receipt that the last reconcile run left unapplied.",
            value=max(0, last["missing"] - last["applied"]),
        ),
        results,
    ]


_Q = queries.load("stripe_api")
