"""The incident timeline of one receipt, as ``receipts show`` prints it.

Everything here only reads, through the named statements of
``receipts/queries/reports.sql``. The frozen email (body, invoice link) is
read only when the caller asks for the payload.

An attempt leaves the provider's side unknown when it never finished (in
flight while its lease holds, *abandoned* once it expired: the worker died
mid-attempt) or finished without an answer (timeout, connection error); see
the attempt outcomes in ``docs/architecture.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from receipts import queries
from receipts.config import PROVIDER_KEY_RETENTION_HOURS
from receipts.db import Connection
from receipts.message_keys import provider_tag
from receipts.vocabulary import NOT_SENT_OUTCOMES, AttemptOutcome

_REPORTS = queries.load("reports")


@dataclass(frozen=True, kw_only=True)
class Timeline:
    """Everything known about one message key, oldest first within each part."""

    message_key: str
    row: dict[str, Any]
    events: list[dict[str, Any]]
    attempts: list[dict[str, Any]]
    actions: list[dict[str, Any]]
    deliveries: list[dict[str, Any]]
    payload: dict[str, Any] | None = None


def names_message_key(key_or_invoice: str) -> bool:
    """A message key has slashes (``platform/live/in_…/invoice-paid``); an invoice id has none."""
    return "/" in key_or_invoice


def read_timeline(conn: Connection, key: str, *, with_payload: bool = False) -> Timeline:
    by_key = {"key": key}
    row = conn.execute(_REPORTS["timeline_row"], by_key).fetchone()
    assert row is not None, key
    payload = None
    if with_payload:
        found = conn.execute(_REPORTS["timeline_payload"], by_key).fetchone()
        payload = found["payload"] if found else None
    return Timeline(
        message_key=key,
        row=row,
        events=conn.execute(_REPORTS["timeline_stripe_events"], by_key).fetchall(),
        attempts=_attempts(conn, key),
        actions=conn.execute(_REPORTS["timeline_operator_actions"], by_key).fetchall(),
        deliveries=conn.execute(
            _REPORTS["timeline_delivery_events"], {"key": key, "tag": provider_tag(key)}
        ).fetchall(),
        payload=payload,
    )


def _attempts(conn: Connection, key: str) -> list[dict[str, Any]]:
    rows = conn.execute(
        _REPORTS["timeline_attempts"],
        {"key": key, "key_retention_seconds": PROVIDER_KEY_RETENTION_HOURS * 3600},
    ).fetchall()
    for attempt in rows:
        attempt["uncertain"] = attempt_note(attempt)
    return rows


def unrecorded_sends(deliveries: list[dict[str, Any]]) -> dict[str, datetime]:
    """Emails Resend reported with a receipt's tag that the receipt never recorded
    (evidence, or older unknown-email events matched by tag), by id, with when Resend
    accepted each (the email's creation time, else the earliest event's time)."""
    found: dict[str, datetime] = {}
    for delivery in deliveries:
        if delivery["outcome"] not in ("evidence", "unknown_email") or not delivery["email_id"]:
            continue
        when = (
            delivery.get("email_created_at") or delivery["occurred_at"] or delivery["received_at"]
        )
        earlier = found.get(delivery["email_id"])
        found[delivery["email_id"]] = when if earlier is None else min(earlier, when)
    return dict(sorted(found.items()))


def may_have_been_accepted(attempt: dict[str, Any]) -> bool:
    """False only when the attempt provably did not make the provider send."""
    status = attempt.get("http_status")
    if status is not None and 400 <= status <= 499:
        return False
    return attempt.get("outcome") not in NOT_SENT_OUTCOMES


def attempt_note(attempt: dict[str, Any]) -> str | None:
    """Why an attempt leaves the provider's side unknown, or None if it does not."""
    if attempt["outcome"] is None and attempt["finished_at"] is None:
        if attempt.get("lease_held"):
            return "in flight"
        return "abandoned: the worker died mid-attempt; the provider may have accepted it"
    if attempt["outcome"] == AttemptOutcome.SENT or not may_have_been_accepted(attempt):
        return None
    if attempt["http_status"] is None:
        return "no answer (timeout or connection error); the provider may have accepted it"
    if 200 <= attempt["http_status"] <= 299:
        return "the provider answered 2xx but the receipt was not recorded as sent by it"
    return None
