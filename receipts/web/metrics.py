"""``GET /metrics`` in Prometheus format, through ``prometheus_client``.

Two kinds of figures:

* counters the web process increments (webhook deliveries by source, event
  type, outcome and HTTP code; handling time). Under gunicorn each worker is
  a process: with ``PROMETHEUS_MULTIPROC_DIR`` set, every scrape merges all
  workers' files (``gunicorn.conf.py`` marks dead workers);
* gauges read from the database at scrape time (outbox rows by status, the
  oldest pending age, time left before the retry cutoff, review rows by
  reason, conflicts, receipts not delivered, the sending pause, whether the
  provider is failing, recent provider answers and send latency). When the
  database cannot be read the scrape still succeeds and says
  ``receipts_database_up 0``. They come from
  :mod:`receipts.operations.status_summary` in one transaction whose
  statements are bounded in time (``receipts/queries/reports.sql``).

Who may scrape is decided in :mod:`receipts.web.metrics_access`: a private
``RECEIPTS_METRICS_PORT``, or ``Authorization: Bearer <RECEIPTS_METRICS_TOKEN>``
(401 without it, 403 when neither is configured); ``RECEIPTS_METRICS_ENABLED=false``
switches it off (404).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping

import psycopg
from flask import Blueprint, Flask, Response, current_app, request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from receipts import queries
from receipts.config import Settings
from receipts.db import Database, DatabaseUnavailable, describe_error
from receipts.logs import log_fields
from receipts.operations.status_summary import (
    DELIVERY_PROBLEMS,
    ProviderActivity,
    Status,
    read_provider_activity,
    read_status,
)
from receipts.operations.stripe_status import StripeCollector
from receipts.vocabulary import ReviewReason
from receipts.web import metrics_access

log = logging.getLogger(__name__)
_REPORTS = queries.load("reports")

blueprint = Blueprint("metrics", __name__)

WEBHOOKS = Counter(
    "receipts_webhooks",
    "Webhook deliveries answered, by source (stripe, resend), event type, outcome and HTTP code.",
    ["source", "type", "outcome", "code"],
)
WEBHOOK_SECONDS = Histogram(
    "receipts_webhook_seconds",
    "Time to answer a webhook delivery, by source.",
    ["source"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)

PROVIDER_WINDOW_SECONDS = 900
_EXTENSION = "receipts_metrics"


def event_type_label(event_type: str, known: Mapping[str, object] | Iterable[str]) -> str:
    """A bounded label: the known types by name, everything else ``other``."""
    return event_type if event_type in known else "other"


def count_webhook(source: str, event_type: str, outcome: str, code: int, started: float) -> None:
    WEBHOOKS.labels(source=source, type=event_type, outcome=outcome, code=str(code)).inc()
    WEBHOOK_SECONDS.labels(source=source).observe(time.perf_counter() - started)


def init_app(app: Flask, settings: Settings, database: Database) -> None:
    """Register ``/metrics`` with a registry of the database gauges for this app."""
    database_registry = CollectorRegistry(auto_describe=False)
    database_registry.register(OutboxCollector(database, settings.retry_cutoff_hours))
    database_registry.register(StripeCollector(database))
    app.extensions[_EXTENSION] = database_registry
    app.register_blueprint(blueprint)


@blueprint.get("/metrics")
def metrics() -> Response:
    settings: Settings = current_app.extensions["receipts"].settings
    refused = metrics_access.refusal(settings, request.environ)
    if refused is not None:
        return refused
    body = generate_latest(_process_registry()) + generate_latest(
        current_app.extensions[_EXTENSION]
    )
    return Response(body, status=200, headers={"Content-Type": CONTENT_TYPE_LATEST})


def _process_registry() -> CollectorRegistry:
    """This process's counters, or every gunicorn worker's when multiprocess."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return registry
    return REGISTRY


class OutboxCollector(Collector):
    """Gauges read from the database when Prometheus scrapes."""

    def __init__(self, database: Database, retry_cutoff_hours: float) -> None:
        self._database = database
        self._cutoff_hours = retry_cutoff_hours

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        try:
            with self._database.transaction() as conn:
                conn.execute(_REPORTS["limit_scrape_time"])
                conn.execute(_REPORTS["no_jit"])
                status = read_status(conn, retry_cutoff_hours=self._cutoff_hours)
                activity = read_provider_activity(conn, window_seconds=PROVIDER_WINDOW_SECONDS)
        except (DatabaseUnavailable, psycopg.Error) as exc:
            log_fields(
                log, "metrics: database not readable", logging.WARNING, reason=describe_error(exc)
            )
            return [_gauge("receipts_database_up", "1 if the database answered this scrape.", 0)]
        return [
            _gauge("receipts_database_up", "1 if the database answered this scrape.", 1),
            *_status_metrics(status, self._cutoff_hours),
            *_provider_metrics(activity),
        ]


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _labelled(
    name: str, documentation: str, label: str, values: Mapping[str, float]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for label_value, value in values.items():
        family.add_metric([label_value], value)
    return family


def _status_metrics(status: Status, cutoff_hours: float) -> list[Metric]:
    found: list[Metric] = [
        _labelled("receipts_outbox_rows", "Outbox rows by status.", "status", status.counts),
        _labelled(
            "receipts_review_rows",
            'Review rows by reason, resent ones excepted; reason="dismissed" needs nobody.',
            "reason",
            {**status.review_by_reason, ReviewReason.DISMISSED.value: status.dismissed},
        ),
        _gauge(
            "receipts_review_open_rows",
            "Review rows that need a person (dismissed and resent ones excluded).",
            status.open_review,
        ),
        _gauge(
            "receipts_review_resent_rows",
            "Review rows a resend settled (its email carries theirs); they need nobody.",
            status.resent,
        ),
        _gauge(
            "receipts_outbox_oldest_pending_age_seconds",
            "How long the oldest ready pending row has waited (0 when none).",
            status.oldest_pending_age_seconds or 0.0,
        ),
        _gauge(
            "receipts_retry_cutoff_seconds",
            "No automatic retry after this long since a receipt's first attempt.",
            cutoff_hours * 3600,
        ),
        _gauge(
            "receipts_stripe_conflicts_24h",
            "Stripe events in the last 24 h whose key matched a different email.",
            status.conflicts_24h,
        ),
        _gauge(
            "receipts_lease_recoveries_24h",
            "Attempts in the last 24 h that followed an attempt whose worker died.",
            status.lease_recoveries_24h,
        ),
        _gauge(
            "receipts_abandoned_attempts",
            "Attempts whose worker died and whose receipt has not been claimed again.",
            status.abandoned_attempts,
        ),
        _gauge(
            "receipts_delivery_events_unknown_email_24h",
            "Resend delivery events in the last 24 h for an email id no receipt has.",
            status.unknown_delivery_events_24h,
        ),
        _gauge(
            "receipts_delivery_events_evidence_24h",
            "Resend events in the last 24 h about a send no receipt recorded, named by its tag.",
            status.evidence_delivery_events_24h,
        ),
        _gauge("receipts_sent_1h", "Receipts sent in the last hour.", status.sent_last_hour),
        *_sending_metrics(status),
        _labelled(
            "receipts_delivery_problems_24h",
            "Sent receipts that failed, were suppressed, bounced or were marked as spam "
            "in the last 24 h (failed and suppressed need a person).",
            "delivery_status",
            {
                kind.value: sum(
                    1 for p in status.delivery_problems_24h if p["delivery_status"] == kind
                )
                for kind in DELIVERY_PROBLEMS
            },
        ),
    ]
    if status.retry_cutoff_remaining_seconds is not None:
        found.append(
            _gauge(
                "receipts_retry_cutoff_remaining_seconds",
                "Time left before the receipt retried longest reaches the retry cutoff "
                "(absent when none is being retried).",
                status.retry_cutoff_remaining_seconds,
            )
        )
    return found


def _sending_metrics(status: Status) -> list[Metric]:
    """Whether the workers can send: a quota pause in force, a failing provider."""
    found: list[Metric] = [
        _gauge(
            "receipts_sending_paused",
            "1 while a quota answer pauses all sending (receipts worker exits 4), else 0.",
            1 if status.sending_pauses else 0,
        ),
        _gauge(
            "receipts_provider_failing",
            "1 while the provider's recent answers are all retries (timeouts, 5xx), else 0.",
            1 if status.provider_failing is not None else 0,
        ),
    ]
    if status.sending_pauses:
        left = max(pause["seconds_left"] for pause in status.sending_pauses)
        found.append(
            _gauge(
                "receipts_sending_pause_remaining_seconds",
                "Time left before the sending pause ends (absent when none).",
                left,
            )
        )
    if status.provider_failing is not None:
        failing = max(0.0, time.time() - status.provider_failing["since"].timestamp())
        found.append(
            _gauge(
                "receipts_provider_failing_seconds",
                "How long the provider has been failing (absent when not).",
                failing,
            )
        )
    return found  # fmt: skip


def _provider_metrics(activity: ProviderActivity) -> list[Metric]:
    window = f"attempts finished in the last {activity.window_seconds // 60} minutes"
    latency = SummaryMetricFamily(
        "receipts_provider_latency_seconds",
        f"Provider request duration, {window}.",
        count_value=activity.latency_count,
        sum_value=activity.latency_sum,
    )
    quantiles = _labelled(
        "receipts_provider_latency_quantile_seconds",
        f"Provider request duration quantiles, {window}.",
        "quantile",
        activity.latency_quantiles,
    )
    answers = _labelled(
        "receipts_provider_answers",
        f"Provider answers by class (2xx, 4xx, 5xx, timeout), {window}.",
        "class",
        activity.answers,
    )
    return [latency, quantiles, answers]
