"""The health summary an operator reads: ``receipts status`` and ``/metrics``.

Everything here only reads, in the caller's transaction, through the named
statements of ``receipts/queries/reports.sql``. Attempt rows are read with
the worker's meaning (``docs/architecture.md``, attempt outcomes): an attempt
whose ``outcome`` and ``finished_at`` are still NULL is in flight while its
lease holds, and *abandoned* once the lease has expired with nobody claiming
the row again (the worker died mid-attempt; the provider may have accepted
the email). The provider is *failing* when its recent answers are all
retries (timeouts, 5xx, connection errors: at least
:data:`PROVIDER_FAILING_MIN_ATTEMPTS` since it last answered as working, the
newest within :data:`PROVIDER_FAILING_WINDOW_SECONDS`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, LiteralString

from receipts import queries
from receipts.db import Connection
from receipts.vocabulary import (
    NOT_DELIVERED,
    AttemptOutcome,
    DeliveryStatus,
    ReviewReason,
    RowStatus,
)

_REPORTS = queries.load("reports")

# Delivery statuses of a sent receipt that went wrong, listed by status and /metrics.
DELIVERY_PROBLEMS = (*NOT_DELIVERED, DeliveryStatus.COMPLAINED)
# Of those, the ones that need a person: Resend never tried, so nobody else will
# tell the customer (a bounce is the customer's address and stays information).
NEEDS_PERSON_DELIVERY = (DeliveryStatus.SUPPRESSED, DeliveryStatus.FAILED)
# Attempt outcomes that show the provider answering as it should; a `retry`
# after the last of them is a failure.
PROVIDER_WORKING = (
    AttemptOutcome.SENT,
    AttemptOutcome.REVIEW,
    AttemptOutcome.RATE_LIMITED,
    AttemptOutcome.QUOTA_EXCEEDED,
    AttemptOutcome.CONFIG_ERROR,
)
PROVIDER_FAILING_MIN_ATTEMPTS = 3
PROVIDER_FAILING_WINDOW_SECONDS = 3600
PROVIDER_ANSWER_CLASSES = ("2xx", "4xx", "5xx", "timeout")
LATENCY_QUANTILES = (0.5, 0.95, 0.99)


@dataclass(frozen=True, kw_only=True)
class Status:
    """One snapshot of the outbox, as ``receipts status`` and ``/metrics`` report it."""

    counts: dict[str, int]
    oldest_pending_age_seconds: float | None
    closest_to_cutoff_key: str | None
    retry_cutoff_remaining_seconds: float | None
    review_by_reason: dict[str, int]  # open review rows: neither dismissed nor resent
    dismissed: int
    resent: int  # review rows a resend settled: its email carries theirs
    lease_recoveries_24h: int
    abandoned_attempts: int
    conflicts_24h: int
    unknown_delivery_events_24h: int
    evidence_delivery_events_24h: int  # sends the worker never recorded, named by tag
    delivery_problems_24h: list[dict[str, Any]]  # DELIVERY_PROBLEMS receipts, newest first
    sending_pauses: list[dict[str, Any]]  # quota pauses in force
    provider_failing: dict[str, Any] | None  # since, latest, failures; None when working
    sent_last_hour: int
    sent_last_day: int

    @property
    def open_review(self) -> int:
        """Review rows that still need a person (dismissed and resent ones do not)."""
        return sum(self.review_by_reason.values())

    @property
    def not_delivered_needing_a_person(self) -> list[dict[str, Any]]:
        """Receipts Resend failed or suppressed in the last 24 h."""
        return [
            problem
            for problem in self.delivery_problems_24h
            if problem["delivery_status"] in NEEDS_PERSON_DELIVERY
        ]

    def as_dict(self) -> dict[str, Any]:
        document = asdict(self)
        document["open_review"] = self.open_review
        return document


def read_status(conn: Connection, *, retry_cutoff_hours: float) -> Status:
    """Read the whole summary in the caller's transaction (one consistent snapshot)."""
    counts = dict.fromkeys((status.value for status in RowStatus), 0)
    for row in conn.execute(_REPORTS["count_rows_by_status"]):
        counts[row["status"]] = row["n"]
    reasons: dict[str, int] = {}
    resent = 0
    for row in conn.execute(_REPORTS["count_review_rows_by_reason"]):
        if row["resent"]:
            resent += row["n"]
        else:
            reasons[row["review_reason"]] = row["n"]
    dismissed = reasons.pop(ReviewReason.DISMISSED, 0)
    ages = _one(conn, _REPORTS["oldest_ready_pending_age"])
    cutoff = _one(
        conn,
        _REPORTS["closest_to_retry_cutoff"],
        {"cutoff_seconds": retry_cutoff_hours * 3600},
    )
    recent = _one(conn, _REPORTS["recent_activity"]) or {}
    problems = conn.execute(
        _REPORTS["recent_delivery_problems"], {"problem_statuses": list(DELIVERY_PROBLEMS)}
    ).fetchall()
    pauses = conn.execute(_REPORTS["active_sending_pauses"]).fetchall()
    return Status(
        counts=counts,
        oldest_pending_age_seconds=ages["oldest_pending"] if ages else None,
        closest_to_cutoff_key=cutoff["message_key"] if cutoff else None,
        retry_cutoff_remaining_seconds=cutoff["remaining"] if cutoff else None,
        review_by_reason=reasons,
        dismissed=dismissed,
        resent=resent,
        lease_recoveries_24h=recent.get("lease_recoveries", 0),
        abandoned_attempts=recent.get("abandoned", 0),
        conflicts_24h=recent.get("conflicts", 0),
        unknown_delivery_events_24h=recent.get("unknown_deliveries", 0),
        evidence_delivery_events_24h=recent.get("evidence_deliveries", 0),
        delivery_problems_24h=sorted(
            problems, key=lambda found: found["delivery_status_at"], reverse=True
        ),
        sending_pauses=pauses,
        provider_failing=_one(
            conn,
            _REPORTS["provider_failing_since"],
            {
                "answered": [*PROVIDER_WORKING, AttemptOutcome.RETRY],
                "failed": AttemptOutcome.RETRY,
                "min_failures": PROVIDER_FAILING_MIN_ATTEMPTS,
                "window_seconds": PROVIDER_FAILING_WINDOW_SECONDS,
            },
        ),
        sent_last_hour=recent.get("sent_hour", 0),
        sent_last_day=recent.get("sent_day", 0),
    )


@dataclass(frozen=True, kw_only=True)
class ProviderActivity:
    """Recent provider calls, for ``/metrics``: latency and answers by class."""

    window_seconds: int
    answers: dict[str, int]  # 2xx, 4xx, 5xx, timeout
    latency_count: int
    latency_sum: float
    latency_quantiles: dict[str, float] = field(default_factory=dict)


def read_provider_activity(conn: Connection, *, window_seconds: int = 900) -> ProviderActivity:
    """Attempts that finished within the window: how the provider answered, how fast.

    Only attempts started within twice the window are read (through the
    started_at index); a provider call lasts seconds, far less than that.
    """
    window = {
        "window_seconds": window_seconds,
        "started_within_seconds": window_seconds * 2,
        "retry": AttemptOutcome.RETRY,
        "quantiles": list(LATENCY_QUANTILES),
    }
    answers = dict.fromkeys(PROVIDER_ANSWER_CLASSES, 0)
    for row in conn.execute(_REPORTS["provider_answers_by_class"], window):
        if row["answer"] is not None:
            answers[row["answer"]] = row["n"]
    latency = _one(conn, _REPORTS["provider_latency"], window)
    assert latency is not None
    quantiles = latency["quantiles"] or []
    return ProviderActivity(
        window_seconds=window_seconds,
        answers=answers,
        latency_count=latency["n"],
        latency_sum=latency["total"],
        latency_quantiles={
            str(quantile): float(value)
            for quantile, value in zip(LATENCY_QUANTILES, quantiles, strict=False)
        },
    )


def _one(
    conn: Connection, statement: LiteralString, params: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    found: dict[str, Any] | None = conn.execute(statement, params).fetchone()
    return found
