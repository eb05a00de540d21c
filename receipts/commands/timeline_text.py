"""How ``receipts show`` prints one receipt's timeline: the row, then each part in order.

The frozen email (body, invoice link) appears only when the timeline carries
it (``--payload``); addresses and the provider's messages are shown, since
that is what support needs to act.
"""

from __future__ import annotations

import json
from typing import Any

from receipts.formatting import iso, money
from receipts.message_keys import COPY_SUFFIX, INVOICE_PAID, describe_purpose
from receipts.operations.timeline import Timeline, unrecorded_sends
from receipts.vocabulary import ADDRESS_REVIEW_REASONS, NOT_DELIVERED, ReviewReason, RowStatus


def render(timeline: Timeline) -> str:
    row = timeline.row
    lines = [f"receipt {timeline.message_key}"]
    state = row["status"] + (f" ({row['review_reason']})" if row["review_reason"] else "")
    if row["status"] == RowStatus.REVIEW and row["resent_as"]:
        state += ", settled by a resend: needs no decision"
    lines += [
        f"  email         {_email(row)}",
        f"  status        {state}",
        f"  invoice       {_invoice(row)}  account {row['account']}  "
        f"{'live' if row['livemode'] else 'test'}",
        f"  recipients    {', '.join(row['recipients'] or []) or '-'}",
        f"  created       {iso(row['created_at'])} from event {row['source_event_id']}",
        f"  attempts      {row['attempts']}  first {iso(row['first_attempt_at'])}  "
        f"next ready {iso(row['available_at'])}",
    ]
    if row["status"] == RowStatus.PROCESSING:
        lines.append(f"  leased until  {iso(row['locked_until'])}")
    if row["provider_id"] or row["sent_at"]:
        lines.append(f"  sent          {iso(row['sent_at'])}  provider id {row['provider_id']}")
    if row["delivery_status"]:
        detail = f" ({row['delivery_detail']})" if row["delivery_detail"] else ""
        lines.append(
            f"  delivery      {row['delivery_status']}{detail} at "
            f"{iso(row['delivery_status_at'])}{_not_delivered_note(row['delivery_status'])}"
        )
    if not row["recipients"] and row["customer_email"]:
        lines.append(f"  customer      {row['customer_email']} (as the invoice gave it)")
    if row["last_error"]:
        lines.append(f"  last error    {row['last_error']}")
    lines += _resend_lines(timeline)
    lines += _decision_hint(timeline)
    lines += _second_email_hint(timeline)
    lines += _section("stripe events", timeline.events, _event_line)
    lines += _section("attempts", timeline.attempts, _attempt_line)
    lines += _section("operator actions", timeline.actions, _action_line)
    lines += _section("delivery events", timeline.deliveries, _delivery_line)
    if timeline.payload is not None:
        lines.append("  payload")
        lines += ["    " + line for line in json.dumps(timeline.payload, indent=2).splitlines()]
    return "\n".join(lines)


def _email(row: dict[str, Any]) -> str:
    """``Receipt``, or ``Refund receipt re_… ($15.00)``: a refund's or credit note's own amount."""
    label = describe_purpose(row["purpose"])
    if _is_receipt(row):
        return label
    told = money(row["amount"], row["currency"])
    return f"{label} ({told})" if told else label


def _is_receipt(row: dict[str, Any]) -> bool:
    return bool(row["purpose"].removesuffix(COPY_SUFFIX) == INVOICE_PAID)


def _invoice(row: dict[str, Any]) -> str:
    """``in_… (ACME-0102, $19.99)``: the id, and what support calls it when known (the
    amount is the invoice's on a receipt; a refund's or credit note's is on its email line)."""
    known = [
        row["invoice_number"],
        money(row["amount"], row["currency"]) if _is_receipt(row) else None,
    ]
    details = ", ".join(part for part in known if part)
    return f"{row['invoice_id']} ({details})" if details else row["invoice_id"]


def _resend_lines(timeline: Timeline) -> list[str]:
    """``resent as KEY/resend-1 (sent …) by alice at …``, and ``resend of KEY by …``."""
    row = timeline.row
    lines = []
    if row["resent_as"]:
        by = _by(timeline, "resend", lambda d: d.get("new_key") == row["resent_as"])
        lines.append(f"  resent as     {row['resent_as']} ({_resend_progress(row)}){by}")
    created = [a for a in timeline.actions if a["action"] == "resend_created"]
    if created:
        first = created[0]
        lines.append(
            f"  resend of     {first['details'].get('resend_of')} by {first['performed_by']} "
            f"at {iso(first['performed_at'])}"
        )
    return lines


def _by(timeline: Timeline, action: str, matches: Any) -> str:
    found = [a for a in timeline.actions if a["action"] == action and matches(a["details"])]
    if not found:
        return ""
    return f" by {found[-1]['performed_by']} at {iso(found[-1]['performed_at'])}"


def _resend_progress(row: dict[str, Any]) -> str:
    status = row["resend_status"]
    if status is None:
        return "no longer stored"
    if status == RowStatus.SENT:
        return f"sent {iso(row['resend_sent_at'])}, provider id {row['resend_provider_id']}"
    if status == RowStatus.REVIEW:
        return f"in review: {row['resend_review_reason']}"
    return str(status)


def _decision_hint(timeline: Timeline) -> list[str]:
    """For an open review row: the commands, and whether the provider may have it."""
    row = timeline.row
    if (
        row["status"] != RowStatus.REVIEW
        or row["review_reason"] == ReviewReason.DISMISSED
        or row["resent_as"]
    ):
        return []
    hint = [f"  decide        receipts review resolve|retry|resend|dismiss {row['message_key']} "
            "--reason …"]  # fmt: skip
    if row["review_reason"] in ADDRESS_REVIEW_REASONS and row["has_render_input"]:
        hint.append(
            f"  fix address   receipts review resend {row['message_key']} --to ADDRESS "
            "--reason … (sends the receipt there, and only there)"
        )
    if any(a["uncertain"] and a["beyond_key_window"] for a in timeline.attempts):
        hint.append(
            "  ! an attempt that may have reached the provider is older than its 24 h "
            "idempotency window: look the key up in the provider's logs before a retry"
        )
    for email_id, accepted_at in unrecorded_sends(timeline.deliveries).items():
        hint.append(
            f"  ! Resend accepted email {email_id} with this receipt's tag at {iso(accepted_at)}: "
            f"it was sent (`receipts review resolve {row['message_key']} --provider-id "
            f"{email_id} --sent-at {iso(accepted_at)} --reason …`)"
        )
    return hint


def _second_email_hint(timeline: Timeline) -> list[str]:
    """A sent receipt whose tag Resend reported on another email: perhaps a second copy."""
    row = timeline.row
    others = set(unrecorded_sends(timeline.deliveries)) - {row["provider_id"]}
    if row["status"] != RowStatus.SENT or not others:
        return []
    return [
        f"  ! Resend also reported email {email_id} with this receipt's tag: the customer "
        "may have two copies (look both ids up in Resend's logs)"
        for email_id in sorted(others)
    ]


def _not_delivered_note(delivery_status: str) -> str:
    if delivery_status in NOT_DELIVERED:
        return ": the customer did not get it"
    return ""


def _section(title: str, items: list[dict[str, Any]], line: Any) -> list[str]:
    if not items:
        return [f"  {title}: none"]
    return [f"  {title}:"] + [f"    {line(item)}" for item in items]


def _event_line(event: dict[str, Any]) -> str:
    detail = f" ({event['detail']})" if event["detail"] else ""
    return (
        f"{event['event_id']} {event['event_type']} {event['outcome']}{detail}, "
        f"{event['deliveries']} deliveries, first {iso(event['first_received_at'])}, "
        f"last {iso(event['last_received_at'])}"
    )


def _attempt_line(attempt: dict[str, Any]) -> str:
    parts = [
        f"#{attempt['attempt']} {iso(attempt['started_at'])} worker {attempt['worker_id']}",
        f"outcome {attempt['outcome'] or '-'}",
        f"http {attempt['http_status'] or '-'}",
    ]
    if attempt["provider_error"]:
        parts.append(f"error {attempt['provider_error']}")
    if attempt.get("provider_message"):
        parts.append(f"message {attempt['provider_message']!r}")
    if attempt["provider_id"]:
        parts.append(f"provider id {attempt['provider_id']}")
    if attempt["finished_at"]:
        parts.append(f"finished {iso(attempt['finished_at'])}")
    line = ", ".join(parts)
    if attempt["uncertain"]:
        line += f"\n      ! {attempt['uncertain']}"
    return line


def _action_line(action: dict[str, Any]) -> str:
    details = f" {json.dumps(action['details'], sort_keys=True)}" if action["details"] else ""
    return (
        f"{iso(action['performed_at'])} {action['action']} by {action['performed_by']}: "
        f"{action['reason']}{details}"
    )


def _delivery_line(delivery: dict[str, Any]) -> str:
    line = (
        f"{iso(delivery['occurred_at'] or delivery['received_at'])} {delivery['event_type']} "
        f"({delivery['outcome']}) svix id {delivery['svix_id']}"
    )
    if delivery["detail"]:
        line += f", reason {delivery['detail']}"
    if delivery["outcome"] in ("unknown_email", "evidence"):
        line += f", email {delivery['email_id']} not recorded on this receipt (matched by tag)"
    return line
