"""Decisions a person takes about receipts in ``review``, each one recorded.

Every decision runs in the caller's transaction: it locks the row, checks its
state, changes it only while it is still in review and records an operator
action (who, when, why). A decision that does not apply raises
:class:`Refused` and the transaction rolls back: nothing changes. The
statements are in ``receipts/queries/review.sql``; the outbox states a
decision moves a row between are in ``docs/architecture.md``. A deliberate
second email (``resend``) is in :mod:`receipts.operations.resending`.

A dismissed receipt (no email will be sent, e.g. Stripe already sent one)
stays in review with the reason :attr:`ReviewReason.DISMISSED`; its earlier
reason is in the action's details. It no longer counts as needing a person.
"""

from __future__ import annotations

import getpass
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from receipts import queries
from receipts.config import PROVIDER_KEY_RETENTION_HOURS
from receipts.db import Connection
from receipts.ingest.delivery_events import DELIVERY_STATUSES
from receipts.message_keys import provider_tag
from receipts.operations.operator_input import InvalidInput, operator
from receipts.operations.timeline import may_have_been_accepted
from receipts.vocabulary import NOTIFY_CHANNEL, ReviewReason, RowStatus

_REVIEW = queries.load("review")


def operator_name(environ: Mapping[str, str], by: str | None = None) -> str:
    """Who is deciding: ``--by`` if given, else RECEIPTS_OPERATOR, else the OS user.

    InvalidInput when ``--by`` or RECEIPTS_OPERATOR is given but is not a name on
    one line; a blank variable counts as unset.
    """
    if by is not None:
        return operator(by, source="--by")
    for name in ("RECEIPTS_OPERATOR", "USER", "LOGNAME"):
        if environ.get(name, "").strip():
            return operator(environ[name], source=name)
    try:
        return operator(getpass.getuser(), source="the OS user name")
    except (KeyError, OSError, InvalidInput):
        return "unknown"


class Refused(Exception):
    """The decision does not apply to this receipt; the message says why."""


@dataclass(frozen=True, kw_only=True)
class Decider:
    """Who decides, and why: recorded with every change."""

    performed_by: str
    reason: str


def record_action(
    conn: Connection,
    key: str,
    action: str,
    decider: Decider,
    details: dict[str, Any] | None = None,
) -> None:
    """Record who decided what about a receipt, when and why."""
    conn.execute(
        _REVIEW["record_operator_action"],
        {
            "key": key,
            "action": action,
            "performed_by": decider.performed_by,
            "reason": decider.reason,
            "details": Jsonb(details or {}),
        },
    )


def list_review(
    conn: Connection, *, reason: str | None = None, include_dismissed: bool = False
) -> list[dict[str, Any]]:
    """Review rows, oldest first; dismissed ones only when asked for.

    ``evidence``: the emails Resend reported with the row's tag that no
    receipt recorded (``{"email_id", "accepted_at"}``, earliest first): it was
    sent, and ``receipts review resolve`` with that id is the decision to
    offer. ``provider_reported_send`` says whether there is any.
    """
    rows = conn.execute(
        _REVIEW["list_review_rows"],
        {"reason": reason, "all": include_dismissed, "dismissed": ReviewReason.DISMISSED},
    ).fetchall()
    evidence = evidence_of_unrecorded_sends(conn, [row["message_key"] for row in rows])
    for row in rows:
        row["evidence"] = evidence.get(row["message_key"], [])
        row["provider_reported_send"] = bool(row["evidence"])
    return rows


def evidence_of_unrecorded_sends(
    conn: Connection, keys: list[str]
) -> dict[str, list[dict[str, Any]]]:
    """By receipt: the emails Resend accepted for it that it never recorded."""
    if not keys:
        return {}
    by_tag = {provider_tag(key): key for key in keys}
    found: dict[str, list[dict[str, Any]]] = {}
    for row in conn.execute(
        _REVIEW["evidence_of_unrecorded_sends"], {"keys": keys, "tags": list(by_tag)}
    ):
        key = row["message_key"] or by_tag.get(row["message_tag"])
        if key is None:
            continue
        sends = found.setdefault(key, [])
        if all(send["email_id"] != row["email_id"] for send in sends):
            sends.append({"email_id": row["email_id"], "accepted_at": row["accepted_at"]})
    return found


def resolve(
    conn: Connection,
    key: str,
    decider: Decider,
    *,
    provider_id: str,
    sent_at: datetime | None = None,
) -> None:
    """The person found the email in the provider's logs: record it as sent."""
    row = _lock_review_row(conn, key, "resolved")
    conn.execute(
        _REVIEW["mark_review_row_sent"],
        {"key": key, "provider_id": provider_id, "sent_at": sent_at},
    )
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
    record_action(
        conn,
        key,
        "resolve",
        decider,
        {"previous_reason": row["review_reason"], "provider_id": provider_id},
    )


def retry(
    conn: Connection,
    key: str,
    decider: Decider,
    *,
    retry_cutoff_hours: float,
    accept_duplicate_risk: bool = False,
) -> datetime | None:
    """Back to ``pending`` with a fresh retry window; return when that window started.

    An earlier attempt that may have reached the provider (the worker died
    mid-send, a timeout, a 2xx without an id) decides how:

    * none: a fresh window (``first_attempt_at`` NULL);
    * a recent one: the window keeps counting from it, so the worker stops
      retrying before the provider forgets the key; refused when that cutoff
      has already passed (the worker would not send it);
    * one older than the provider's idempotency window: refused, since a
      retry could send a second email.

    ``accept_duplicate_risk`` is the person saying they checked the provider's
    logs: a fresh window whatever the attempts say.
    """
    row = _lock_review_row(conn, key, "retried")
    # A row whose email could not be rendered keeps what it is rendered from.
    if row["payload"] is None and row["render_input"] is None:
        raise Refused(
            f"{key} has no frozen email ({row['review_reason']}): there is nothing to send. "
            "Dismiss it, or resolve it if it was sent some other way."
        )
    uncertain = [a for a in _attempts(conn, key, retry_cutoff_hours) if may_have_been_accepted(a)]
    window_start = None if accept_duplicate_risk else _retry_window_start(key, uncertain)
    conn.execute(_REVIEW["requeue_review_row"], {"key": key, "window_start": window_start})
    wake_workers(conn)
    record_action(
        conn,
        key,
        "retry",
        decider,
        {
            "previous_reason": row["review_reason"],
            "previous_attempts": row["attempts"],
            "accepted_duplicate_risk": bool(accept_duplicate_risk and uncertain),
            "window_starts_at": window_start.isoformat() if window_start else None,
        },
    )
    return window_start


def _retry_window_start(key: str, uncertain: list[dict[str, Any]]) -> datetime | None:
    """Where the new retry window starts, or Refused when no safe window is left."""
    if not uncertain:
        return None
    first = uncertain[0]
    when = f"attempt #{first['attempt']} of {key} at {first['started_at']:%Y-%m-%d %H:%M} UTC"
    advice = (
        "Look the key up in the provider's logs: if it was sent, use "
        "`receipts review resolve KEY --provider-id ID`; if it was not, rerun with "
        "--accept-duplicate-risk."
    )
    if first["beyond_key_window"]:
        raise Refused(
            f"{when} may have reached the provider, which forgets its idempotency key after "
            f"{PROVIDER_KEY_RETENTION_HOURS:g} h: a retry could send a second email. {advice}"
        )
    if first["past_cutoff"]:
        raise Refused(
            f"{when} may have reached the provider, and the retry cutoff counted from it has "
            f"passed: the worker would not send it before the provider forgets the key. {advice}"
        )
    started: datetime = first["started_at"]
    return started


def dismiss(conn: Connection, key: str, decider: Decider) -> None:
    """No email will be sent for this receipt; it stops counting as needing a person."""
    row = _lock_review_row(conn, key, "dismissed")
    if row["review_reason"] == ReviewReason.DISMISSED:
        raise Refused(f"{key} is already dismissed")
    conn.execute(_REVIEW["dismiss_review_row"], {"key": key, "dismissed": ReviewReason.DISMISSED})
    record_action(conn, key, "dismiss", decider, {"previous_reason": row["review_reason"]})


def _lock_review_row(conn: Connection, key: str, verb: str) -> dict[str, Any]:
    row: dict[str, Any] | None = conn.execute(_REVIEW["lock_receipt"], {"key": key}).fetchone()
    if row is None:
        raise Refused(f"no receipt with message key {key!r}")
    if row["status"] != RowStatus.REVIEW:
        raise Refused(f"{key} is {row['status']}, not in review: only review rows can be {verb}")
    return row


def _attempts(conn: Connection, key: str, cutoff_hours: float) -> list[dict[str, Any]]:
    """Attempts oldest first, with whether the provider may have forgotten their key
    and whether the retry cutoff counted from them has passed."""
    return conn.execute(
        _REVIEW["review_attempts"],
        {
            "key": key,
            "key_retention_seconds": PROVIDER_KEY_RETENTION_HOURS * 3600,
            "cutoff_seconds": cutoff_hours * 3600,
        },
    ).fetchall()


def wake_workers(conn: Connection) -> None:
    """Idle workers pick the row up as soon as the decision commits."""
    conn.execute(_REVIEW["wake_workers"], {"channel": NOTIFY_CHANNEL})
