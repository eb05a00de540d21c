"""A deliberate new email for a receipt, under a new key (``receipts review resend``).

The copy is a new outbox row keyed ``<receipt's key>/resend-<n>``: the worker
sends it like any other receipt. It carries the receipt's frozen email (to a
new address with ``--to``), or, for a receipt whose email was never made (the
invoice came without a usable customer email, or its first claim could not
render it), the invoice it is rendered from, which the worker renders at the
copy's first claim, to the new address only.

A resend settles the receipt: every review row of the family that needed a
person records ``resent_as`` and stops counting as open. It is guarded like
every decision (:mod:`receipts.operations.duplicate_risk`): refused while
another email of the family is on its way, and, unless the person accepts
the duplicate risk, when one was sent or may have been. The statements are in
``receipts/queries/review.sql``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Json, Jsonb

from receipts import queries
from receipts.addresses import is_email_address
from receipts.db import Connection
from receipts.message_keys import MAX_KEY_LENGTH, provider_tag
from receipts.operations.duplicate_risk import (
    refuse_if_dismissed,
    refuse_on_risks,
    risks_from_the_family,
    risks_of_a_new_key,
)
from receipts.operations.receipt_family import ON_ITS_WAY, Family, read_family, state_phrase
from receipts.operations.review import (
    Decider,
    Refused,
    one_transaction,
    record_action,
    wake_workers,
)
from receipts.receipt.invoice_values import UnusableInvoice
from receipts.receipt.payload import read_render_input
from receipts.vocabulary import ADDRESS_REVIEW_REASONS, ReviewReason, RowStatus

_REVIEW = queries.load("review")


@dataclass(frozen=True, kw_only=True)
class Resent:
    """What a resend queued: its key, where it goes, and which receipts it settled."""

    new_key: str
    recipient: str
    previous_recipient: str | None
    rendered_at_first_claim: bool  # the copy carries the invoice, not a frozen email
    settled: list[str]


@dataclass(frozen=True, kw_only=True)
class _Email:
    """The new row's email, or what the worker renders it from."""

    payload: dict[str, Any] | None
    render_input: dict[str, Any] | None
    recipient: str
    previous_recipient: str | None


@one_transaction
def resend(
    conn: Connection,
    key: str,
    decider: Decider,
    *,
    to: str | None = None,
    accept_duplicate_risk: bool = False,
    undo_dismiss: bool = False,
) -> Resent:
    """Queue a deliberate new email under a new key, settling the receipt; say what was done."""
    family = read_family(conn, key)
    if family.row["status"] in ON_ITS_WAY:
        raise Refused(
            f"{state_phrase(family, key)}; a resend now would be a second email. Wait until it "
            "is sent or in review"
        )
    earlier = refuse_if_dismissed(family, undo=undo_dismiss, verb="resent")
    if to is not None and not is_email_address(to):
        raise Refused(f"--to {to!r} is not an email address")
    new_key = family.next_resend_key()
    email = _email_of_the_copy(family, new_key, to)
    accepted = refuse_on_risks(
        risks_from_the_family(family) + risks_of_a_new_key(family),
        accept_risk=accept_duplicate_risk,
        consequence="a resend would be another email to the customer",
        rerun_if="they should get another (it bounced, or they cannot find it)",
    )
    if len(new_key) > MAX_KEY_LENGTH:
        raise Refused(f"the resend key would exceed {MAX_KEY_LENGTH} characters")
    _insert_copy(conn, family, new_key, email)
    settled = _settle(conn, family, new_key, undone_reason=earlier)
    wake_workers(conn)
    resent = Resent(
        new_key=new_key,
        recipient=email.recipient,
        previous_recipient=email.previous_recipient,
        rendered_at_first_claim=email.payload is None,
        settled=settled,
    )
    _record(conn, family, decider, resent, accepted)
    return resent


def _email_of_the_copy(family: Family, new_key: str, to: str | None) -> _Email:
    """The frozen email, readdressed and retagged; else the stored invoice, readdressed."""
    row = family.row
    if row["payload"] is not None:
        previous = _first_recipient(row["payload"])
        return _Email(
            payload=_copy_payload(row["payload"], new_key, to),
            render_input=None,
            recipient=to or previous or "",
            previous_recipient=previous,
        )
    if row["render_input"] is None:
        raise Refused(
            f"{family.key} has no email and nothing stored to make one from "
            f"({row['review_reason']}), so there is nothing to resend. Send the customer "
            "Stripe's own receipt (Dashboard → the invoice → Send receipt), then dismiss it"
        )
    render_input = _readdressed(row["render_input"], to)
    try:
        facts = read_render_input(render_input)
    except UnusableInvoice as unusable:
        raise Refused(_unusable(family.key, unusable.reason, to)) from None
    previous = row["render_input"]["invoice"].get("customer_email")
    return _Email(
        payload=None,
        render_input=render_input,
        recipient=facts.to,
        previous_recipient=previous if isinstance(previous, str) else None,
    )


def _unusable(key: str, reason: str, to: str | None) -> str:
    if reason in ADDRESS_REVIEW_REASONS and to is None:
        return (
            f"{key} has no usable customer email ({reason}): give the right address with "
            "--to ADDRESS"
        )
    return (
        f"{key} cannot become an email ({reason}), whatever the address: fix the invoice in "
        "Stripe and send the customer Stripe's own receipt, then dismiss it"
    )


def _readdressed(render_input: dict[str, Any], to: str | None) -> dict[str, Any]:
    if to is None:
        return render_input
    return {**render_input, "invoice": {**render_input["invoice"], "customer_email": to}}


def _first_recipient(payload: dict[str, Any]) -> str | None:
    recipients = payload.get("to")
    if isinstance(recipients, list) and recipients and isinstance(recipients[0], str):
        return recipients[0]
    return None


def _copy_payload(payload: dict[str, Any], new_key: str, to: str | None) -> dict[str, Any]:
    copy = dict(payload)
    if to is not None:
        copy["to"] = [to]
    tags = [tag for tag in copy.get("tags") or [] if tag.get("name") != "message_key"]
    copy["tags"] = [*tags, {"name": "message_key", "value": provider_tag(new_key)}]
    return copy


def _insert_copy(conn: Connection, family: Family, new_key: str, email: _Email) -> None:
    row = family.row
    conn.execute(
        _REVIEW["insert_resend_row"],
        {
            "key": new_key,
            "purpose": row["purpose"],
            "account": row["account"],
            "livemode": row["livemode"],
            "invoice_id": row["invoice_id"],
            "source_event_id": row["source_event_id"],
            "fingerprint": row["fingerprint"],
            "payload": Jsonb(email.payload) if email.payload is not None else None,
            "render_input": Json(email.render_input) if email.render_input is not None else None,
            "invoice_number": row["invoice_number"],
            "customer_email": email.recipient,
            "amount": row["amount"],
            "currency": row["currency"],
        },
    )


def _settle(
    conn: Connection, family: Family, new_key: str, *, undone_reason: str | None
) -> list[str]:
    """The decided receipt and every review row of the family that needed a person."""
    dismissed = family.row["review_reason"] == ReviewReason.DISMISSED
    keys = [
        row["message_key"]
        for row in family.rows.values()
        if row["message_key"] == family.key
        or (row["status"] == RowStatus.REVIEW and row["review_reason"] != ReviewReason.DISMISSED)
    ]
    changed = conn.execute(
        _REVIEW["settle_resent_rows"],
        {
            "new_key": new_key,
            "keys": keys,
            "undone_key": family.key if dismissed else None,
            "undone_reason": undone_reason,
            "dismissed": ReviewReason.DISMISSED,
        },
    ).fetchall()
    return sorted(found["message_key"] for found in changed)


def _record(
    conn: Connection, family: Family, decider: Decider, resent: Resent, accepted: list[str]
) -> None:
    """Both keys carry the decision; the receipt's action names both addresses."""
    details: dict[str, Any] = {
        "new_key": resent.new_key,
        "to": resent.recipient,
        "previous_to": resent.previous_recipient,
        "recipient_changed": resent.recipient != resent.previous_recipient,
        "email": "rendered at its first claim from the stored invoice"
        if resent.rendered_at_first_claim
        else "the frozen email",
        "settled": resent.settled,
    }
    if accepted:
        details |= {"accepted_duplicate_risk": True, "accepted_risks": accepted}
    if family.row["review_reason"] == ReviewReason.DISMISSED:
        details["undid_dismiss"] = True
    record_action(conn, family.key, "resend", decider, details)
    record_action(
        conn,
        resent.new_key,
        "resend_created",
        decider,
        {"resend_of": family.key, "to": resent.recipient},
    )
