"""Decisions a person takes about receipts in ``review``, each one recorded.

Every decision runs in the caller's transaction: it locks the row, checks its
state, changes it with ``UPDATE … WHERE status = 'review'`` and writes an
``operator_actions`` row (who, when, why). A decision that does not apply
raises :class:`Refused` and the transaction rolls back: nothing changes.

A dismissed receipt (no email will be sent, e.g. Stripe already sent one)
stays ``review`` with ``review_reason = 'dismissed'``; its earlier reason is in
the action's details. It no longer counts as needing a person.
"""

from __future__ import annotations

import getpass
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from receipts.addresses import is_email_address
from receipts.config import PROVIDER_KEY_RETENTION_HOURS
from receipts.db import Connection
from receipts.ingest.receipt import MAX_KEY_LENGTH, resend_tag_value
from receipts.operations.reports import DISMISSED, may_have_been_accepted
from receipts.vocabulary import NOTIFY_CHANNEL

_RESEND_SUFFIX = re.compile(r"/resend-(\d+)\Z")


def operator_name(environ: Mapping[str, str]) -> str:
    """Who is deciding when ``--by`` is not given: RECEIPTS_OPERATOR, else the OS user."""
    for name in ("RECEIPTS_OPERATOR", "USER", "LOGNAME"):
        if environ.get(name):
            return environ[name]
    try:
        return getpass.getuser()
    except (KeyError, OSError):
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
    conn.execute(
        """INSERT INTO operator_actions (message_key, action, performed_by, reason, details)
           VALUES (%s, %s, %s, %s, %s)""",
        (key, action, decider.performed_by, decider.reason, Jsonb(details or {})),
    )


def list_review(
    conn: Connection, *, reason: str | None = None, include_dismissed: bool = False
) -> list[dict[str, Any]]:
    """Review rows, oldest first; dismissed ones only when asked for."""
    return conn.execute(
        """SELECT message_key, invoice_id, review_reason, attempts, created_at, updated_at,
                  first_attempt_at, last_error, payload IS NOT NULL AS has_email,
                  EXISTS (SELECT 1 FROM email_attempts a
                           WHERE a.message_key = o.message_key
                             AND a.outcome IS NULL AND a.finished_at IS NULL) AS abandoned_attempt,
                  EXISTS (SELECT 1 FROM resend_events e
                           WHERE e.outcome = 'unknown_email'
                             AND e.message_tag = left(regexp_replace(
                                 o.message_key, '[^A-Za-z0-9_-]', '_', 'g'), 256))
                      AS provider_reported_send
           FROM email_outbox o
           WHERE status = 'review'
             AND (%(reason)s::text IS NULL OR review_reason = %(reason)s)
             AND (%(all)s OR %(reason)s::text = 'dismissed' OR review_reason <> 'dismissed')
           ORDER BY created_at, message_key""",
        {"reason": reason, "all": include_dismissed},
    ).fetchall()


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
        """UPDATE email_outbox
           SET status = 'sent', provider_id = %s, sent_at = coalesce(%s, now()),
               review_reason = NULL, lease_token = NULL, locked_until = NULL, updated_at = now()
           WHERE message_key = %s AND status = 'review'""",
        (provider_id, sent_at, key),
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
    if row["payload"] is None:
        raise Refused(
            f"{key} has no frozen email ({row['review_reason']}): there is nothing to send. "
            "Dismiss it, or resolve it if it was sent some other way."
        )
    uncertain = [a for a in _attempts(conn, key, retry_cutoff_hours) if may_have_been_accepted(a)]
    window_start = None if accept_duplicate_risk else _retry_window_start(key, uncertain)
    conn.execute(
        """UPDATE email_outbox
           SET status = 'pending', review_reason = NULL, attempts = 0, first_attempt_at = %s,
               available_at = now(), lease_token = NULL, locked_until = NULL, updated_at = now()
           WHERE message_key = %s AND status = 'review'""",
        (window_start, key),
    )
    conn.execute("SELECT pg_notify(%s, '')", (NOTIFY_CHANNEL,))
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


def resend(conn: Connection, key: str, decider: Decider, *, to: str | None = None) -> str:
    """Queue a deliberate second email under a new key; return that key.

    The original row is left as it is. The copy carries the same frozen email,
    or the same email to a new recipient with ``to``.
    """
    base = _RESEND_SUFFIX.sub("", key)
    locked = conn.execute(
        "SELECT * FROM email_outbox WHERE message_key IN (%s, %s) ORDER BY message_key FOR UPDATE",
        (base, key),
    ).fetchall()
    row = next((found for found in locked if found["message_key"] == key), None)
    if row is None:
        raise Refused(f"no receipt with message key {key!r}")
    if row["status"] in ("pending", "processing"):
        raise Refused(
            f"{key} is {row['status']}: it is still being sent, so a resend now would be a "
            "second email. Wait for it to be sent or reach review."
        )
    if row["payload"] is None:
        raise Refused(f"{key} has no frozen email ({row['review_reason']}): nothing to resend")
    if to is not None and not is_email_address(to):
        raise Refused(f"--to {to!r} is not an email address")
    _refuse_unsent_resend(conn, base)
    new_key = f"{base}/resend-{_next_resend_number(conn, base)}"
    if len(new_key) > MAX_KEY_LENGTH:
        raise Refused(f"the resend key would exceed {MAX_KEY_LENGTH} characters")
    conn.execute(
        """INSERT INTO email_outbox
               (message_key, purpose, account, livemode, invoice_id, source_event_id,
                fingerprint, payload, status)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 'pending')""",
        (
            new_key,
            row["purpose"],
            row["account"],
            row["livemode"],
            row["invoice_id"],
            row["source_event_id"],
            row["fingerprint"],
            Jsonb(_resend_payload(row["payload"], new_key, to)),
        ),
    )
    conn.execute("SELECT pg_notify(%s, '')", (NOTIFY_CHANNEL,))
    changed = to is not None
    record_action(conn, key, "resend", decider, {"new_key": new_key, "recipient_changed": changed})
    record_action(
        conn, new_key, "resend_created", decider, {"resend_of": key, "recipient_changed": changed}
    )
    return new_key


def dismiss(conn: Connection, key: str, decider: Decider) -> None:
    """No email will be sent for this receipt; it stops counting as needing a person."""
    row = _lock_review_row(conn, key, "dismissed")
    if row["review_reason"] == DISMISSED:
        raise Refused(f"{key} is already dismissed")
    conn.execute(
        """UPDATE email_outbox SET review_reason = %s, updated_at = now()
           WHERE message_key = %s AND status = 'review'""",
        (DISMISSED, key),
    )
    record_action(conn, key, "dismiss", decider, {"previous_reason": row["review_reason"]})


def _lock_review_row(conn: Connection, key: str, verb: str) -> dict[str, Any]:
    row: dict[str, Any] | None = conn.execute(
        "SELECT * FROM email_outbox WHERE message_key = %s FOR UPDATE", (key,)
    ).fetchone()
    if row is None:
        raise Refused(f"no receipt with message key {key!r}")
    if row["status"] != "review":
        raise Refused(f"{key} is {row['status']}, not in review: only review rows can be {verb}")
    return row


def _attempts(conn: Connection, key: str, cutoff_hours: float) -> list[dict[str, Any]]:
    """Attempts oldest first, with whether the provider may have forgotten their key
    and whether the retry cutoff counted from them has passed."""
    return conn.execute(
        """SELECT attempt, started_at, finished_at, http_status, outcome,
                  started_at < now() - make_interval(secs => %s) AS beyond_key_window,
                  started_at < now() - make_interval(secs => %s) AS past_cutoff
           FROM email_attempts WHERE message_key = %s ORDER BY started_at, id""",
        (PROVIDER_KEY_RETENTION_HOURS * 3600, cutoff_hours * 3600, key),
    ).fetchall()


def _refuse_unsent_resend(conn: Connection, base: str) -> None:
    """A resend still on its way makes another one a third email: refuse it."""
    waiting = conn.execute(
        """SELECT message_key, status FROM email_outbox
           WHERE starts_with(message_key, %s) AND status IN ('pending', 'processing')""",
        (base + "/resend-",),
    ).fetchone()
    if waiting is not None:
        raise Refused(
            f"{waiting['message_key']} is {waiting['status']}: a resend of this receipt is "
            "still on its way. Wait for it before resending again."
        )


def _next_resend_number(conn: Connection, base: str) -> int:
    numbers = [
        int(match.group(1))
        for found in conn.execute(
            "SELECT message_key FROM email_outbox WHERE starts_with(message_key, %s)",
            (base + "/resend-",),
        )
        if (match := _RESEND_SUFFIX.search(found["message_key"]))
    ]
    return max(numbers, default=0) + 1


def _resend_payload(payload: dict[str, Any], new_key: str, to: str | None) -> dict[str, Any]:
    copy = dict(payload)
    if to is not None:
        copy["to"] = [to]
    tags = [tag for tag in copy.get("tags") or [] if tag.get("name") != "message_key"]
    copy["tags"] = [*tags, {"name": "message_key", "value": resend_tag_value(new_key)}]
    return copy
