"""``receipts show KEY|INVOICE_ID|INVOICE_NUMBER|EMAIL|EVENT_ID|PROVIDER_ID``: what happened.

Support holds an invoice number or a customer's address more often than a
message key: each is looked up (``receipts.operations.lookup``) and every
receipt it names is shown with its incident timeline (an address: all
receipts to it, newest first). An event that made no receipt (a zero-value
invoice is *ignored*) is shown with its reason, and an event id looked up
says what that event became (queued, duplicate, conflict, ignored) and why.

The frozen email (body, invoice link) is printed only with ``--payload``.
Exit 1 when nothing at all matches: then no receipt and no recorded Stripe
event names it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from receipts.commands import database_settings
from receipts.commands.timeline_text import render
from receipts.formatting import iso
from receipts.operations.lookup import EVENT_ID, MESSAGE_KEY, Found, event_verdict, look_up
from receipts.operations.snapshot import read_only_snapshot
from receipts.operations.timeline import Timeline, read_timeline

_TARGET = "KEY|INVOICE_ID|INVOICE_NUMBER|EMAIL|EVENT_ID|PROVIDER_ID"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target",
        metavar=_TARGET,
        help="a message key, an in_… id, an invoice number (ACME-0102), a customer's email "
        "address, a Stripe event id (evt_…) or the provider's email id",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--payload",
        action="store_true",
        help="also print the frozen email (recipients, body, invoice link)",
    )


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    _settings, database_url = database_settings(environ)
    target = args.target.strip()
    with read_only_snapshot(database_url) as conn:
        found = look_up(conn, target)
        timelines = [read_timeline(conn, key, with_payload=args.payload) for key in found.keys]
    if found.empty:
        print(f"receipts show: {_nothing_found(found)}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(_as_json(found, timelines, args.payload), indent=2, default=str))
    else:
        print("\n\n".join(_text(found, timelines)))
    return 0


def _nothing_found(found: Found) -> str:
    nothing = f"no receipt found for {found.kind} {found.target!r}"
    if found.kind == MESSAGE_KEY:
        return nothing
    return (
        f"{nothing}, and no Stripe event names it: the event never reached us, or it is "
        "older than `receipts prune` keeps events (30 days by default). "
        "`receipts reconcile` finds paid invoices without a receipt."
    )


def _text(found: Found, timelines: list[Timeline]) -> list[str]:
    blocks: list[str] = []
    if found.thin_event is not None:
        blocks.append(_thin_line(found.thin_event))
    if found.kind == EVENT_ID:
        blocks += [_event_block(event, timelines) for event in found.events]
    elif found.events:
        blocks.append(_rowless_block(found))
    if len(timelines) > 1:
        blocks.append(f"{len(timelines)} receipts for {found.kind} {found.target}:")
    blocks += [render(timeline) for timeline in timelines]
    return blocks


def _event_block(event: dict[str, Any], timelines: list[Timeline]) -> str:
    fingerprint = timelines[0].row.get("fingerprint") if timelines else None
    return (
        f"event {event['event_id']} {event['event_type']} {_about(event)}, "
        f"{event['deliveries']} deliveries, first {iso(event['first_received_at'])}"
        f"{_source(event)}\n  {event_verdict(event, fingerprint)}"
    )


def _rowless_block(found: Found) -> str:
    lines = [f"Stripe events for {found.kind} {found.target} that made no receipt:"]
    for event in found.events:
        lines.append(
            f"  {event['event_id']} {event['event_type']} {_about(event)}, "
            f"first {iso(event['first_received_at'])}{_source(event)}"
        )
        lines.append(f"    {event_verdict(event)}")
    return "\n".join(lines)


def _about(event: dict[str, Any]) -> str:
    facts = [event["invoice_number"], event["customer_email"]]
    details = ", ".join(fact for fact in facts if fact)
    invoice = event["invoice_id"] or "no invoice"
    return f"for {invoice}" + (f" ({details})" if details else "")


def _source(event: dict[str, Any]) -> str:
    return f", via {event['source']}" if event.get("source") not in (None, "webhook") else ""


def _thin_line(thin: dict[str, Any]) -> str:
    error = f"; last error: {thin['last_error']}" if thin["last_error"] else ""
    return (
        f"thin event {thin['event_id']} {thin['event_type']} for {thin['related_object_id']}: "
        f"received {thin['deliveries']} time(s), first {iso(thin['first_received_at'])}; its "
        f"invoice has not been fetched from Stripe's API yet ({thin['fetch_attempts']} "
        f"tries{error}). Stripe's next delivery or `receipts backfill` fetches it."
    )


def _as_json(found: Found, timelines: list[Timeline], with_payload: bool) -> list[dict[str, Any]]:
    """One entry per receipt; an event that made none is an entry with ``message_key`` null."""
    verdicts = {event["event_id"]: event_verdict(event) for event in found.events}
    document: list[dict[str, Any]] = [
        {"message_key": None, "stripe_event": event, "verdict": verdicts[event["event_id"]]}
        for event in found.events
        if not event["message_key"]
    ]
    if found.thin_event is not None:
        document.append({"message_key": None, "thin_event": found.thin_event})
    for timeline in timelines:
        entry = _timeline_json(timeline, with_payload)
        matched = [event for event in found.events if event["message_key"] == timeline.message_key]
        if matched:
            entry["matched_event"] = matched[0]
            entry["verdict"] = event_verdict(matched[0], timeline.row.get("fingerprint"))
        document.append(entry)
    return document


def _timeline_json(timeline: Timeline, with_payload: bool) -> dict[str, Any]:
    row = dict(timeline.row)
    row["lease_token"] = str(row["lease_token"]) if row["lease_token"] else None
    document: dict[str, Any] = {
        "message_key": timeline.message_key,
        "row": row,
        "stripe_events": timeline.events,
        "attempts": timeline.attempts,
        "operator_actions": timeline.actions,
        "delivery_events": timeline.deliveries,
    }
    if with_payload:
        document["payload"] = timeline.payload
    return document
