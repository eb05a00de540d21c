"""The verdict: what Stripe was told, what the outbox holds, what the provider delivered.

* lost: a 200 answer whose message key has no outbox row; a row ``sent`` that
  the provider never delivered (or under another id);
* doubles: a key the provider delivered more than once, or one it delivered
  that the outbox does not know;
* stuck: a row still ``pending`` or ``processing`` after the drain, or in
  ``review`` without a reason.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tests.soak.traffic import Answer


@dataclass
class Verdict:
    rows_by_status: Counter[str] = field(default_factory=Counter)
    attempts_by_outcome: Counter[str] = field(default_factory=Counter)
    deliveries: int = 0
    lost: dict[str, str] = field(default_factory=dict)  # key -> what happened
    doubles: dict[str, str] = field(default_factory=dict)
    stuck: dict[str, str] = field(default_factory=dict)
    reviews: Counter[str] = field(default_factory=Counter)  # review reasons

    @property
    def holds(self) -> bool:
        return not (self.lost or self.doubles or self.stuck)

    def summary(self) -> str:
        return f"{len(self.lost)} lost, {len(self.doubles)} doubles, {len(self.stuck)} stuck"


def outbox_rows(database_url: str) -> list[dict[str, Any]]:
    with psycopg.connect(database_url, row_factory=dict_row) as db:
        return db.execute(
            """SELECT message_key, status, review_reason, provider_id, sent_at, attempts
                 FROM email_outbox ORDER BY message_key"""
        ).fetchall()


def unfinished_counts(database_url: str) -> int:
    with psycopg.connect(database_url, row_factory=dict_row) as db:
        row = db.execute(
            "SELECT count(*) AS n FROM email_outbox WHERE status IN ('pending', 'processing')"
        ).fetchone()
    return int(row["n"]) if row else 0


def check(database_url: str, answers: list[Answer], deliveries: list[dict[str, str]]) -> Verdict:
    verdict = Verdict(deliveries=len(deliveries))
    rows = {row["message_key"]: row for row in outbox_rows(database_url)}
    with psycopg.connect(database_url, row_factory=dict_row) as db:
        for row in db.execute(
            "SELECT coalesce(outcome, 'unfinished') AS outcome, count(*) AS n "
            "FROM email_attempts GROUP BY 1"
        ):
            verdict.attempts_by_outcome[row["outcome"]] = row["n"]
    delivered: dict[str, list[str]] = {}
    for delivery in deliveries:
        delivered.setdefault(delivery["key"], []).append(delivery["id"])
    for answer in answers:
        if answer.status == 200 and answer.message_key and answer.message_key not in rows:
            verdict.lost[answer.message_key] = (
                f"answered 200 ({answer.outcome}) to {answer.event_id} at {answer.at} s, no row"
            )
    for key, row in rows.items():
        _check_row(verdict, key, row, delivered.get(key, []))
    for key, ids in delivered.items():
        if key not in rows:
            verdict.doubles[key] = f"delivered {len(ids)} times, no outbox row"
    return verdict


def _check_row(verdict: Verdict, key: str, row: dict[str, Any], ids: list[str]) -> None:
    """One outbox row against the provider ids delivered under its key."""
    verdict.rows_by_status[row["status"]] += 1
    if len(ids) > 1:
        verdict.doubles[key] = f"delivered {len(ids)} times: {ids} (row {row['status']})"
    if row["status"] == "sent" and row["provider_id"] not in ids:
        verdict.lost[key] = f"sent as {row['provider_id']}, the provider delivered {ids}"
    elif row["status"] == "review":
        verdict.reviews[row["review_reason"] or "(no reason)"] += 1
        if not row["review_reason"]:
            verdict.stuck[key] = "in review without a reason"
    elif row["status"] in ("pending", "processing"):
        verdict.stuck[key] = f"{row['status']} after the drain ({row['attempts']} attempts)"
