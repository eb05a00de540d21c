"""How ``receipts review list`` prints the receipts waiting for a person.

One block per receipt: key, reason, age, attempts and flags; the invoice as
support knows it; the provider's last answer; Resend's evidence of a send
offered as the ``resolve`` to run; and, for a receipt a resend settled
(``--all``), that resend and how far it got. ``--json`` carries the same
under stable names.
"""

from __future__ import annotations

import json
from typing import Any

from receipts.formatting import duration, iso, money


def print_list(rows: list[dict[str, Any]], settled: dict[str, int], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps([_list_entry(row) for row in rows], indent=2, default=str))
        return
    if not rows:
        print("no receipts in review")
    for row in rows:
        print(
            f"{row['message_key']}  {row['review_reason']}  age {duration(row['age_seconds'])}  "
            f"attempts {row['attempts']}{_list_flags(row)}"
        )
        print(f"    {_invoice_line(row)}")
        if row["resent_as"]:
            print(f"    {resent_line(row)}")
        said = _provider_said(row)
        if said:
            print(f"    provider said: {said}")
        elif row["last_error"]:
            print(f"    last error: {row['last_error']}")
        for line in _evidence_offer(row):
            print(line)
    if rows:
        print(f"{len(rows)} receipt(s)")
    hidden = _settled_line(rows, settled)
    if hidden:
        print(hidden)


def resent_line(row: dict[str, Any]) -> str:
    """``resent as KEY/resend-1 (sent 2026-12-01T10:03:00+00:00)``: settled, and how far it got."""
    if row["resend_status"] is None:
        progress = "no longer stored"
    elif row["resend_status"] == "sent":
        progress = f"sent {iso(row['resend_sent_at'])}"
    elif row["resend_status"] == "review":
        progress = f"in review: {row['resend_review_reason']}"
    else:
        progress = row["resend_status"]
    return f"resent as {row['resent_as']} ({progress}); needs no decision"


def _settled_line(rows: list[dict[str, Any]], settled: dict[str, int]) -> str | None:
    """How many settled receipts the list left out (none are left out with ``--all``)."""
    shown = {row["message_key"] for row in rows if row["resent_as"]}
    resent = settled["resent"] - len(shown)
    dismissed = settled["dismissed"] - sum(
        1 for row in rows if not row["resent_as"] and row["review_reason"] == "dismissed"
    )
    parts = [f"{n} {what}" for n, what in ((resent, "resent"), (dismissed, "dismissed")) if n > 0]
    if not parts:
        return None
    return f"not listed, needing no decision: {', '.join(parts)} (`receipts review list --all`)"


def _evidence_offer(row: dict[str, Any]) -> list[str]:
    """Resend reported sending it: offer to resolve it with the email's id."""
    lines = []
    for send in row["evidence"]:
        email_id, accepted_at = send["email_id"], iso(send["accepted_at"])
        lines += [
            f"    Resend accepted it at {accepted_at} as email {email_id}; resolve with this id?",
            f"      receipts review resolve {row['message_key']} --provider-id {email_id} "
            f"--sent-at {accepted_at} --reason 'Resend reported it sent'",
        ]
    if len(row["evidence"]) > 1:
        lines.append("    ! more than one email carries its tag: check Resend's logs for both")
    return lines


def _invoice_line(row: dict[str, Any]) -> str:
    """``invoice ACME-0102  $19.99  to jenny@example.com``: what support knows it by."""
    parts = [row["invoice_number"] or row["invoice_id"], money(row["amount"], row["currency"])]
    customer = row["customer_email"] or "no address"
    return f"invoice {'  '.join(part for part in parts if part)}  to {customer}"


def _list_flags(row: dict[str, Any]) -> str:
    flags = []
    if not row["has_email"]:
        flags.append(
            "no email yet: `review resend --to` can make one"
            if row["has_render_input"]
            else "no email could be made"
        )
    if row["abandoned_attempt"]:
        flags.append("has an attempt that never finished")
    if row["provider_reported_send"]:
        flags.append("the provider reported sending it: see `receipts show`")
    return f"  [{'; '.join(flags)}]" if flags else ""


def _provider_said(row: dict[str, Any]) -> str | None:
    """``HTTP 422 validation_error: "Invalid `to` field…"``: the provider's last answer."""
    parts = []
    if row["last_http_status"] is not None:
        parts.append(f"HTTP {row['last_http_status']}")
    if row["last_provider_error"]:
        parts.append(row["last_provider_error"])
    said = " ".join(parts)
    if row["last_provider_message"]:
        said += f": {json.dumps(row['last_provider_message'], ensure_ascii=False)}"
    return said or None


def _list_entry(row: dict[str, Any]) -> dict[str, Any]:
    """The JSON of one row: what the text shows, under stable names."""
    return {
        "message_key": row["message_key"],
        "review_reason": row["review_reason"],
        "age_seconds": round(row["age_seconds"], 1),
        "attempts": row["attempts"],
        "invoice_id": row["invoice_id"],
        "invoice_number": row["invoice_number"],
        "customer_email": row["customer_email"],
        "amount": row["amount"],
        "currency": row["currency"],
        "amount_display": money(row["amount"], row["currency"]),
        "last_error": row["last_error"],
        "provider_http_status": row["last_http_status"],
        "provider_error": row["last_provider_error"],
        "provider_message": row["last_provider_message"],
        "has_email": row["has_email"],
        "can_be_rendered": row["has_render_input"],
        "abandoned_attempt": row["abandoned_attempt"],
        "provider_reported_send": row["provider_reported_send"],
        "evidence": [
            {"email_id": send["email_id"], "accepted_at": str(send["accepted_at"])}
            for send in row["evidence"]
        ],
        "resent_as": row["resent_as"],
        "resend_status": row["resend_status"],
        "resend_sent_at": row["resend_sent_at"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "first_attempt_at": row["first_attempt_at"],
    }
