"""The status page's chart: receipts per day over the last 30 days, as SVG shapes.

One small bar chart per series (sent, went to review, not delivered), each
scaled to its own largest day, so a handful of problems is not flattened by
thousands of sends. Geometry only: the template draws the shapes, with a
``<title>`` per bar and a table of the same numbers for screen readers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from receipts import queries
from receipts.db import Connection
from receipts.vocabulary import AttemptOutcome

DAYS = 30
WIDTH = 330  # viewBox units; the SVG scales to its container
HEIGHT = 90
LEFT = 30  # room for the axis labels
BOTTOM = 16
SERIES = (
    ("sent", "Sent"),
    ("to_review", "Went to review"),
    ("not_delivered", "Not delivered (bounced, suppressed, failed)"),
)
# Attempt outcomes that move a row to review (the provider refused, a cutoff or budget).
REVIEW_OUTCOMES = (
    AttemptOutcome.REVIEW,
    AttemptOutcome.SKIPPED_CUTOFF,
    AttemptOutcome.SKIPPED_BUDGET,
)

_CONSOLE = queries.load("console")


@dataclass(frozen=True, kw_only=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str  # "2026-12-01: 12"


@dataclass(frozen=True, kw_only=True)
class Panel:
    name: str  # css class
    title: str
    total: int
    peak: int
    bars: list[Bar]


@dataclass(frozen=True, kw_only=True)
class Chart:
    days: list[dict[str, Any]]  # day, sent, to_review, not_delivered
    panels: list[Panel]
    first_day: date
    last_day: date
    time_zone: str
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    bottom: int = BOTTOM


def read_chart(conn: Connection, now: datetime, time_zone: str) -> Chart:
    last_day = now.astimezone(ZoneInfo(time_zone)).date()
    first_day = last_day - timedelta(days=DAYS - 1)
    days = conn.execute(
        _CONSOLE["receipts_per_day"],
        {
            "first_day": first_day,
            "last_day": last_day,
            "time_zone": time_zone,
            "review_outcomes": list(REVIEW_OUTCOMES),
        },
    ).fetchall()
    return Chart(
        days=days,
        panels=[_panel(days, name, title) for name, title in SERIES],
        first_day=first_day,
        last_day=last_day,
        time_zone=time_zone,
    )


def _panel(days: list[dict[str, Any]], name: str, title: str) -> Panel:
    counts = [int(day[name]) for day in days]
    peak = max(counts, default=0)
    slot = (WIDTH - LEFT) / max(1, len(days))
    plot = HEIGHT - BOTTOM
    bars = []
    for index, (day, count) in enumerate(zip(days, counts, strict=True)):
        height = plot * count / peak if peak else 0.0
        if count and height < 1.5:
            height = 1.5  # a day with one receipt among thousands stays visible
        bars.append(
            Bar(
                x=round(LEFT + index * slot + slot * 0.15, 2),
                y=round(plot - height, 2),
                width=round(slot * 0.7, 2),
                height=round(height, 2),
                label=f"{day['day'].isoformat()}: {count}",
            )
        )
    return Panel(name=name, title=title, total=sum(counts), peak=peak, bars=bars)
