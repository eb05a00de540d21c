"""``resolve``, ``retry`` and ``dismiss``: decisions about a receipt in review, each guarded.

Each decision reads the receipt's family under its lock
(:func:`receipts.operations.receipt_family.read_family`), checks that the
state it applies to still holds (the guards of
:mod:`receipts.operations.duplicate_risk`), changes the row with a statement
that repeats the check (``… WHERE status = 'review' …``) and records an
operator action, all in the caller's transaction. A decision that does not
apply raises :class:`Refused` saying what changed and when; the caller rolls
back and nothing changes. Two decisions racing on one family: the second
waits for the first's commit, then sees its effect and is refused.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from receipts import queries
from receipts.config import PROVIDER_KEY_RETENTION_HOURS
from receipts.db import Connection
from receipts.ingest.delivery_events import DELIVERY_STATUSES
from receipts.operations.duplicate_risk import (
    refuse_if_dismissed,
    refuse_on_risks,
    refuse_unless_in_review,
    risks_from_the_family,
)
from receipts.operations.receipt_family import Family, progress, read_family, state_phrase, when
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


@one_transaction
def resolve(
    conn: Connection,
    key: str,
    decider: Decider,
    *,
    provider_id: str,
    sent_at: datetime | None = None,
    accept_duplicate_risk: bool = False,
    undo_dismiss: bool = False,
) -> None:
    """The person found the email in the provider's logs: record it as sent.

    Refused when another email of the family was sent or is on its way (the
    customer would have two), unless the person accepts that; and when the id
    is another email's of the family.
    """
    family = read_family(conn, key)
    refuse_unless_in_review(family, "resolved")
    earlier = refuse_if_dismissed(family, undo=undo_dismiss, verb="recorded as sent")
    _refuse_an_id_of_another_email(family, provider_id)
    # Recording a send sends nothing: only emails the family did send, or is sending, matter.
    accepted = refuse_on_risks(
        risks_from_the_family(family, possible_sends=False),
        accept_risk=accept_duplicate_risk,
        consequence=f"recording {key} as sent too says the customer got two emails",
        rerun_if="the provider's logs show both were sent",
    )
    changed = conn.execute(
        _REVIEW["mark_review_row_sent"],
        {"key": key, "provider_id": provider_id, "sent_at": sent_at},
    ).fetchone()
    _changed_or_refused(changed, family)
    # Delivery events Resend sent before the row knew the id (evidence) count now.
    conn.execute(
        _REVIEW["apply_reported_delivery_status"],
        {
            "key": key,
            "provider_id": provider_id,
            "event_types": list(DELIVERY_STATUSES),
            "statuses": [str(status) for status in DELIVERY_STATUSES.values()],
            "ranks": [status.rank for status in DELIVERY_STATUSES.values()],
        },
    )
    details: dict[str, Any] = {
        "previous_reason": family.row["review_reason"],
        "provider_id": provider_id,
    }
    record_action(conn, key, "resolve", decider, details | _flags(accepted, family, earlier))
    _supersede_open_siblings(conn, family, decider, "resolve")


def _refuse_an_id_of_another_email(family: Family, provider_id: str) -> None:
    for other in family.others():
        if other["provider_id"] == provider_id:
            raise Refused(
                f"{provider_id} is the provider id of {other['message_key']} "
                f"({progress(family, other['message_key'])}), not of {family.key}: that email "
                f"is recorded already. If {family.key} was sent as well, give its own id"
            )


@one_transaction
def retry(
    conn: Connection,
    key: str,
    decider: Decider,
    *,
    retry_cutoff_hours: float,
    accept_duplicate_risk: bool = False,
    undo_dismiss: bool = False,
) -> datetime | None:
    """Back to ``pending`` with a fresh retry window; return when that window started.

    Refused when another email of the family was sent, may have been, or is
    on its way, unless the person accepts the duplicate risk (a resend being
    sent: never). An earlier attempt of this receipt that may have reached
    the provider (the worker died mid-send, a timeout, a 2xx without an id)
    decides the window:

    * none: a fresh window (``first_attempt_at`` NULL);
    * a recent one: the window keeps counting from it, so the worker stops
      retrying before the provider forgets the key; refused when that cutoff
      has already passed (the worker would not send it);
    * one older than the provider's idempotency window: refused, since a
      retry could send a second email.

    ``accept_duplicate_risk`` is the person saying they checked the provider's
    logs: a fresh window whatever the attempts say.
    """
    family = read_family(conn, key)
    refuse_unless_in_review(family, "retried")
    earlier = refuse_if_dismissed(family, undo=undo_dismiss, verb="sent")
    _refuse_what_cannot_be_sent(family)
    accepted = refuse_on_risks(
        risks_from_the_family(family),
        accept_risk=accept_duplicate_risk,
        consequence="retrying would send a second email",
        rerun_if="the customer should get both",
    )
    uncertain = family.uncertain_attempts(key)
    window_start = (
        None if accept_duplicate_risk else _retry_window_start(key, uncertain, retry_cutoff_hours)
    )
    changed = conn.execute(
        _REVIEW["requeue_review_row"], {"key": key, "window_start": window_start}
    ).fetchone()
    _changed_or_refused(changed, family)
    wake_workers(conn)
    row = family.row
    details: dict[str, Any] = {
        "previous_reason": row["review_reason"],
        "previous_attempts": row["attempts"],
        "window_starts_at": window_start.isoformat() if window_start else None,
    }
    if row["resent_as"]:
        details["was_resent_as"] = row["resent_as"]
    flags = _flags(accepted, family, earlier)
    flags["accepted_duplicate_risk"] = bool(accept_duplicate_risk and (uncertain or accepted))
    record_action(conn, key, "retry", decider, details | flags)
    _supersede_open_siblings(conn, family, decider, "retry")
    return window_start


def _refuse_what_cannot_be_sent(family: Family) -> None:
    """A row without an email, or whose stored invoice cannot make one, has nothing to retry."""
    row = family.row
    if row["payload"] is not None:
        return
    if row["render_input"] is None:
        raise Refused(
            f"{family.key} has no email and nothing stored to make one from "
            f"({row['review_reason']}): there is nothing to send. Dismiss it, or resolve it "
            "if it was sent some other way"
        )
    try:
        read_render_input(row["render_input"])
    except UnusableInvoice as unusable:
        advice = (
            f"`receipts review resend {family.key} --to ADDRESS --reason …` sends it to an "
            "address you give"
            if unusable.reason in ADDRESS_REVIEW_REASONS
            else "fix the invoice in Stripe and send the customer Stripe's own receipt, "
            "then dismiss it"
        )
        raise Refused(
            f"{family.key} cannot become an email as Stripe sent it ({unusable.reason}): "
            f"a retry would fail the same way; {advice}"
        ) from None


def _retry_window_start(
    key: str, uncertain: list[dict[str, Any]], cutoff_hours: float
) -> datetime | None:
    """Where the new retry window starts, or Refused when no safe window is left."""
    if not uncertain:
        return None
    first = uncertain[0]
    attempt = f"attempt #{first['attempt']} of {key} at {when(first['started_at'])}"
    advice = (
        "Look the key up in the provider's logs: if it was sent, use "
        "`receipts review resolve KEY --provider-id ID`; if it was not, rerun with "
        "--accept-duplicate-risk"
    )
    if first["age_seconds"] >= PROVIDER_KEY_RETENTION_HOURS * 3600:
        raise Refused(
            f"{attempt} may have reached the provider, which forgets its idempotency key after "
            f"{PROVIDER_KEY_RETENTION_HOURS:g} h: a retry could send a second email. {advice}"
        )
    if first["age_seconds"] >= cutoff_hours * 3600:
        raise Refused(
            f"{attempt} may have reached the provider, and the retry cutoff counted from it has "
            f"passed: the worker would not send it before the provider forgets the key. {advice}"
        )
    started: datetime = first["started_at"]
    return started


@one_transaction
def dismiss(conn: Connection, key: str, decider: Decider) -> None:
    """No email will be sent for this receipt; it stops counting as needing a person."""
    family = read_family(conn, key)
    refuse_unless_in_review(family, "dismissed")
    row = family.row
    if row["review_reason"] == ReviewReason.DISMISSED:
        raise Refused(f"{state_phrase(family, key)}; it is already dismissed")
    if row["resent_as"]:
        raise Refused(
            f"{state_phrase(family, key)}; it needs no decision, so there is nothing to "
            f"dismiss (dismiss {row['resent_as']} instead if that one is in review)"
        )
    changed = conn.execute(
        _REVIEW["dismiss_review_row"], {"key": key, "dismissed": ReviewReason.DISMISSED}
    ).fetchone()
    _changed_or_refused(changed, family)
    record_action(conn, key, "dismiss", decider, {"previous_reason": row["review_reason"]})


def _supersede_open_siblings(
    conn: Connection, family: Family, decider: Decider, decision: str
) -> None:
    """The other emails of the family still waiting for a person need nobody now.

    A resend that failed and is in review, when the receipt itself is retried or
    recorded as sent: the family's one open question is the decided row, so the
    resend is dismissed (in the log as superseded by this decision, by the same
    person) rather than left counting as needing a person after the customer has
    the receipt. Reviving it later takes ``--undo-dismiss``, like any dismissal.
    """
    for other in family.others():
        if other["status"] != RowStatus.REVIEW or other["resent_as"]:
            continue
        if other["review_reason"] == ReviewReason.DISMISSED:
            continue
        changed = conn.execute(
            _REVIEW["dismiss_review_row"],
            {"key": other["message_key"], "dismissed": ReviewReason.DISMISSED},
        ).fetchone()
        if changed is not None:
            details = {
                "previous_reason": other["review_reason"],
                "superseded_by": f"{decision} of {family.key}",
            }
            record_action(conn, other["message_key"], "dismiss", decider, details)


def _flags(accepted: list[str], family: Family, earlier: str | None) -> dict[str, Any]:
    """What the person overrode, for the action log."""
    flags: dict[str, Any] = {}
    if accepted:
        flags["accepted_duplicate_risk"] = True
        flags["accepted_risks"] = accepted
    if family.row["review_reason"] == ReviewReason.DISMISSED:
        flags["undid_dismiss"] = True
        flags["reason_before_dismissal"] = earlier
    return flags


def _changed_or_refused(changed: dict[str, Any] | None, family: Family) -> None:
    """The guarded statement changed the row, as the lock promises; else nothing happens."""
    if changed is None or family.row["status"] != RowStatus.REVIEW:
        raise Refused(f"{family.key} changed while this decision was being made; decide again")
