"""Find receipts by whatever support has in hand, and say why an event made none.

``receipts show`` takes a message key, an invoice id (``in_…``), an invoice
number (``ACME-0102``), a customer's email address, a Stripe event id
(``evt_…``) or the provider's email id. :func:`look_up` tells them apart by
shape and returns the receipts they name, and the recorded Stripe events that
made no receipt (a zero-value invoice is *ignored*), each with its reason in
words. Everything here only reads, through ``receipts/queries/reports.sql``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, LiteralString

from receipts import queries
from receipts.db import Connection
from receipts.message_keys import invoice_id_in_tag, provider_tag
from receipts.vocabulary import IMPORTED_FINGERPRINT_PREFIX, IngestOutcome

_REPORTS = queries.load("reports")

MESSAGE_KEY = "message key"
INVOICE_ID = "invoice id"
INVOICE_NUMBER = "invoice number"
EMAIL = "email address"
EVENT_ID = "event id"
PROVIDER_ID = "provider email id"

_EVENT_ID = re.compile(r"(evt_|reconcile:|backfill:)\S+")
_PROVIDER_ID = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|file_[0-9a-f]{32}", re.I
)

# Why an event made no receipt, in the words support needs.
IGNORED_BECAUSE = {
    "zero_value": "the invoice's total is zero (a trial, a 100% coupon); such invoices get "
    "no receipt unless RECEIPTS_SEND_ZERO_VALUE=true",
    "event_type_not_handled": "only invoice.paid events make receipts",
    "invoice_not_paid": "the invoice in the event was not in status paid",
    "test_mode_off": "a test-mode event, and RECEIPTS_MODES does not include test",
    "live_mode_off": "a live-mode event, and RECEIPTS_MODES does not include live",
}


@dataclass(frozen=True, kw_only=True)
class Found:
    """What one look-up found: receipts (message keys) and explaining events."""

    target: str
    kind: str
    keys: list[str] = field(default_factory=list)
    # Events that made no receipt, or the event looked up itself.
    events: list[dict[str, Any]] = field(default_factory=list)
    thin_event: dict[str, Any] | None = None

    @property
    def empty(self) -> bool:
        return not self.keys and not self.events and self.thin_event is None


def kind_of(target: str) -> str:
    """What the operator typed, told apart by its shape."""
    if "/" in target:
        return MESSAGE_KEY
    if target.startswith("in_"):
        return INVOICE_ID
    if _EVENT_ID.fullmatch(target):
        return EVENT_ID
    if "@" in target:
        return EMAIL
    if _PROVIDER_ID.fullmatch(target):
        return PROVIDER_ID
    return INVOICE_NUMBER


def look_up(conn: Connection, target: str) -> Found:
    """The receipts and the explaining events ``target`` names."""
    kind = kind_of(target)
    if kind == MESSAGE_KEY:
        keys = _keys(conn, _REPORTS["keys_of_message_key"], key=target)
        return Found(target=target, kind=kind, keys=keys)
    if kind == INVOICE_ID:
        return Found(
            target=target,
            kind=kind,
            keys=_keys(conn, _REPORTS["keys_of_invoice"], invoice_id=target),
            events=_rows(conn, _REPORTS["rowless_events_of_invoice"], invoice_id=target),
        )
    if kind == EMAIL:
        return Found(
            target=target,
            kind=kind,
            keys=_keys(conn, _REPORTS["keys_of_customer_email"], email=target),
            events=_rows(conn, _REPORTS["rowless_events_of_customer_email"], email=target),
        )
    if kind == EVENT_ID:
        return _event(conn, target)
    if kind == PROVIDER_ID:
        return Found(target=target, kind=kind, keys=_provider_keys(conn, target))
    by_number = Found(
        target=target,
        kind=kind,
        keys=_keys(conn, _REPORTS["keys_of_invoice_number"], number=target),
        events=_rows(conn, _REPORTS["rowless_events_of_invoice_number"], number=target),
    )
    if by_number.empty:
        # An id of a provider other than Resend has no shape of its own.
        by_provider = _provider_keys(conn, target)
        if by_provider:
            return Found(target=target, kind=PROVIDER_ID, keys=by_provider)
    return by_number


def _event(conn: Connection, event_id: str) -> Found:
    event = conn.execute(_REPORTS["stripe_event"], {"event_id": event_id}).fetchone()
    thin = conn.execute(_REPORTS["thin_event"], {"event_id": event_id}).fetchone()
    keys = [event["message_key"]] if event and event["message_key"] else []
    return Found(
        target=event_id,
        kind=EVENT_ID,
        keys=keys,
        events=[event] if event else [],
        thin_event=thin if thin and thin["status"] != "resolved" else None,
    )


def _provider_keys(conn: Connection, provider_id: str) -> list[str]:
    """Receipts the provider knows by this id; a delivery event matched only by tag counts."""
    keys = set(_keys(conn, _REPORTS["keys_of_provider_id"], provider_id=provider_id))
    tags = _REPORTS["tags_of_provider_id"]
    for tag in _keys(conn, tags, provider_id=provider_id, column="message_tag"):
        invoice_id = invoice_id_in_tag(tag)
        if invoice_id is None:
            continue
        keys.update(
            key
            for key in _keys(conn, _REPORTS["keys_of_invoice"], invoice_id=invoice_id)
            if provider_tag(key) == tag
        )
    return sorted(keys)


def _keys(
    conn: Connection, statement: LiteralString, *, column: str = "message_key", **params: str
) -> list[str]:
    return [row[column] for row in conn.execute(statement, params)]


def _rows(conn: Connection, statement: LiteralString, **params: str) -> list[dict[str, Any]]:
    return conn.execute(statement, params).fetchall()


def event_verdict(event: dict[str, Any], fingerprint: str | None = None) -> str:
    """What an event became and why, in one sentence."""
    outcome = event["outcome"]
    key = event["message_key"]
    if outcome == IngestOutcome.IGNORED:
        detail = event["detail"] or "no reason recorded"
        return f"ignored ({detail}): {IGNORED_BECAUSE.get(detail, detail)}; no receipt was made"
    if outcome == IngestOutcome.DUPLICATE:
        if fingerprint and fingerprint.startswith(IMPORTED_FINGERPRINT_PREFIX):
            return f"duplicate: receipt {key} was imported as already sent by an earlier system"
        return (
            f"duplicate of receipt {key}: same invoice and same content (a redelivery, or "
            "another event about the invoice); nothing new was queued"
        )
    if outcome == IngestOutcome.CONFLICT:
        return (
            f"conflict with receipt {key}: same invoice, different content (recipient, amount "
            "or lines); that receipt was kept unchanged and this event's version was not sent"
        )
    if outcome == IngestOutcome.REVIEW:
        return f"made receipt {key}, in review: {event['detail'] or 'see below'}"
    return f"made receipt {key}"
