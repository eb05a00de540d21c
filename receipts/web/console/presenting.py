"""What the console's pages say about a receipt, in the words support uses.

A timeline (:class:`receipts.operations.timeline.Timeline`) becomes one list
of :class:`Entry`, oldest first, mixing Stripe's events, the send attempts
with the provider's answers, delivery events and people's decisions: what
happened, in order. Nothing here reads the frozen email: the pages never show
an email's body, an invoice link or a secret.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from receipts.formatting import money
from receipts.message_keys import describe_purpose
from receipts.operations.timeline import Timeline
from receipts.vocabulary import NOT_DELIVERED, ReviewReason, RowStatus

# Why a receipt waits for a person, and what usually settles it.
REVIEW_REASONS = {
    "missing_customer_email": "The paid invoice has no customer email address, so no receipt "
    "could be sent. Resend it to the customer's address.",
    "invalid_customer_email": "The invoice's customer email is not a usable address. Resend it "
    "to the corrected address.",
    "invalid_hosted_invoice_url": "Stripe's invoice link is not one the receipt can carry. Fix "
    "the invoice in Stripe and send Stripe's own receipt, then dismiss this one.",
    "invalid_amount_paid": "The invoice's amount paid is not usable. Check the invoice in Stripe.",
    "invalid_currency": "The invoice's currency is not usable. Check the invoice in Stripe.",
    "invalid_invoice_amounts": "The invoice's lines, discounts and taxes do not add up to its "
    "total, so the receipt would be wrong. Check the invoice in Stripe.",
    "render_failed": "The receipt's template failed on this invoice. Retry once the template "
    "is fixed.",
    "retry_window_elapsed": "The provider did not accept it within the retry window. Read the "
    "attempts below before a retry.",
    "attempts_exhausted": "Every allowed attempt failed. Read the provider's answers below "
    "before a retry.",
    "provider_rejected": "The email provider refused this email. Its answer is below.",
    "dismissed": "A person decided no email will be sent for it.",
}
_PROVIDER_REFUSED = "The email provider refused this email ({reason}). Its answer is below."

_RESEND_NUMBER = re.compile(r"/resend-(\d+)\Z")
# Purposes whose label is not describe_purpose's (a refund's or credit note's names its id).
_PURPOSE_LABELS = {"invoice-paid": "Receipt", "invoice-paid-copy": "Accounting copy"}

STATUS_WORDS: dict[str, str] = {
    RowStatus.PENDING: "waiting to be sent",
    RowStatus.PROCESSING: "being sent",
    RowStatus.SENT: "sent",
    RowStatus.REVIEW: "needs a person",
}


def review_reason_text(reason: str | None) -> str:
    if reason is None:
        return ""
    return REVIEW_REASONS.get(reason, _PROVIDER_REFUSED.format(reason=reason))


def reason_summary(reason: str | None) -> str:
    """The first sentence of :func:`review_reason_text`, for a line in a list."""
    text = review_reason_text(reason)
    return text.split(". ", 1)[0].rstrip(".") + "." if text else ""


def state_label(row: dict[str, Any]) -> tuple[str, str]:
    """(words, tone) for a receipt's badge: tone is ok, wait, warn or bad."""
    status = row["status"]
    if status == RowStatus.REVIEW and row.get("resent_as"):
        resend = str(row.get("resend_status") or "made")
        return f"settled: resent ({STATUS_WORDS.get(resend, resend)})", "ok"
    if status == RowStatus.REVIEW:
        if row["review_reason"] == ReviewReason.DISMISSED:
            return "dismissed", "muted"
        return f"needs a person: {row['review_reason']}", "warn"
    if status == RowStatus.SENT:
        delivery = row.get("delivery_status")
        if delivery in NOT_DELIVERED:
            return f"sent, but {delivery}", "bad"
        return (f"sent, {delivery}" if delivery else "sent"), "ok"
    return STATUS_WORDS.get(status, status), "wait"


def email_label(row: dict[str, Any]) -> str:
    """``Resend #1``, ``Receipt``, ``Accounting copy``, ``Refund receipt re_…``, ``Credit
    note cn_…``: which email of the invoice this is."""
    found = _RESEND_NUMBER.search(row["message_key"])
    if found:
        return f"Resend #{found.group(1)}"
    purpose = str(row["purpose"])
    return _PURPOSE_LABELS.get(purpose) or describe_purpose(purpose)


def amount(row: dict[str, Any]) -> str:
    return money(row.get("amount"), row.get("currency")) or "-"


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One thing that happened to a receipt."""

    at: datetime | None
    kind: str  # stripe, attempt, delivery, decision
    title: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    tone: str = ""  # ok, warn, bad or empty
    note: str | None = None


def entries(timeline: Timeline) -> list[Entry]:
    """Everything in the timeline, oldest first."""
    found = [
        *(_stripe_entry(event) for event in timeline.events),
        *(_attempt_entry(attempt) for attempt in timeline.attempts),
        *(_delivery_entry(delivery) for delivery in timeline.deliveries),
        *(_decision_entry(action) for action in timeline.actions),
    ]
    return sorted(found, key=lambda entry: (entry.at is None, entry.at or datetime.min))


def _stripe_entry(event: dict[str, Any]) -> Entry:
    facts = [("event", event["event_id"]), ("outcome", event["outcome"])]
    if event["detail"]:
        facts.append(("detail", event["detail"]))
    if event["deliveries"] > 1:
        facts.append(("deliveries", f"{event['deliveries']} (Stripe redelivered it)"))
    tone = "warn" if event["outcome"] in ("review", "conflict") else ""
    return Entry(
        at=event["first_received_at"],
        kind="stripe",
        title=f"Stripe sent {event['event_type']}",
        facts=facts,
        tone=tone,
    )


def _attempt_entry(attempt: dict[str, Any]) -> Entry:
    facts = [("outcome", attempt["outcome"] or "no outcome recorded")]
    if attempt["http_status"] is not None:
        facts.append(("provider answered", f"HTTP {attempt['http_status']}"))
    if attempt["provider_error"]:
        facts.append(("error", attempt["provider_error"]))
    if attempt.get("provider_message"):
        facts.append(("message", attempt["provider_message"]))
    if attempt["provider_id"]:
        facts.append(("provider id", attempt["provider_id"]))
    facts.append(("worker", attempt["worker_id"]))
    outcome = attempt["outcome"]
    tone = "ok" if outcome == "sent" else ("bad" if outcome == "review" else "")
    return Entry(
        at=attempt["started_at"],
        kind="attempt",
        title=f"Send attempt #{attempt['attempt']}",
        facts=facts,
        tone="warn" if attempt["uncertain"] else tone,
        note=attempt["uncertain"],
    )


def _delivery_entry(delivery: dict[str, Any]) -> Entry:
    facts = [("provider email id", delivery["email_id"] or "-")]
    if delivery["detail"]:
        facts.append(("reason", delivery["detail"]))
    note = None
    if delivery["outcome"] in ("unknown_email", "evidence"):
        note = "This email id is not recorded on the receipt (matched by its tag)."
    bad = any(word in delivery["event_type"] for word in ("bounced", "failed", "suppressed"))
    return Entry(
        at=delivery["occurred_at"] or delivery["received_at"],
        kind="delivery",
        title=f"Provider reported {delivery['event_type']}",
        facts=facts,
        tone="bad" if bad else ("ok" if "delivered" in delivery["event_type"] else ""),
        note=note,
    )


_DECISION_WORDS = {
    "resend": "resent it",
    "resend_created": "made this resend",
    "retry": "retried it",
    "resolve": "recorded it as sent",
    "dismiss": "dismissed it",
}


def _detail(value: Any) -> str:
    if value is True:
        return "yes"
    if isinstance(value, list):
        return ", ".join(_detail(item) for item in value)
    return value if isinstance(value, str) else json.dumps(value)


def _decision_entry(action: dict[str, Any]) -> Entry:
    facts = [("by", action["performed_by"]), ("reason", action["reason"])]
    for name, value in sorted((action["details"] or {}).items()):
        if value is None or value == [] or value is False:
            continue
        facts.append((name.replace("_", " "), _detail(value)))
    what = _DECISION_WORDS.get(action["action"], f"decided: {action['action']}")
    return Entry(
        at=action["performed_at"],
        kind="decision",
        title=f"{action['performed_by']} {what}",
        facts=facts,
    )
