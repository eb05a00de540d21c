"""What a decision sees: a receipt, its resends, their attempts and the decisions so far.

A receipt (``…/invoice-paid``) and its deliberate resends (``…/invoice-paid/
resend-N``) are one *family*: one customer's one email, whichever key carries
it. The product's promise holds for the family: the provider accepts at most
one of its emails unless a person accepts the duplicate risk.

:func:`read_family` runs at the start of every decision, in its transaction:
it takes the family's lock (``review.sql: lock_receipt_family``, held to the
end of the transaction, so two decisions about one family run one after the
other and the second sees what the first did), locks the row decided on, and
reads the family. Its other rows are read without a lock: only decisions
(serialized by that lock) move a row out of review or create one, and what a
worker does to a pending or processing row (send it, or give it back to
review) can only make a guard refuse more, never less.

The phrases below say what changed and when, for the refusals
(docs/architecture.md, "Operator decisions").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from receipts import queries
from receipts.db import Connection
from receipts.operations.review import Refused, evidence_of_unrecorded_sends
from receipts.operations.timeline import may_have_been_accepted
from receipts.vocabulary import NOT_DELIVERED, ReviewReason, RowStatus

_REVIEW = queries.load("review")
RESEND_SUFFIX = re.compile(r"/resend-(\d+)\Z")
# The first key of the two-key advisory locks that serialize decisions.
_DECISION_LOCK_SPACE = 0x52435054  # "RCPT"
# Rows in these states are on their way to the provider: a worker may hold them.
ON_ITS_WAY = (RowStatus.PENDING, RowStatus.PROCESSING)


def base_key(key: str) -> str:
    """The receipt a key belongs to: itself, or the key a ``/resend-N`` copies."""
    return RESEND_SUFFIX.sub("", key)


def resend_prefix(key: str) -> str:
    return base_key(key) + "/resend-"


@dataclass(frozen=True, kw_only=True)
class Family:
    """One receipt decided on (``row``, locked, every column) and its family."""

    key: str
    row: dict[str, Any]
    rows: dict[str, dict[str, Any]]  # by key, the decided one included
    attempts: dict[str, list[dict[str, Any]]]  # by key, oldest first
    actions: dict[str, list[dict[str, Any]]]  # by key, oldest first
    evidence: dict[str, list[dict[str, Any]]]  # emails Resend reported and no row recorded

    @property
    def base(self) -> str:
        return base_key(self.key)

    def others(self) -> list[dict[str, Any]]:
        return [row for key, row in self.rows.items() if key != self.key]

    def last_action(self, key: str, *names: str) -> dict[str, Any] | None:
        found = [a for a in self.actions.get(key, []) if not names or a["action"] in names]
        return found[-1] if found else None

    def uncertain_attempts(self, key: str) -> list[dict[str, Any]]:
        """Attempts of ``key`` the provider may have accepted (the row not sent by them)."""
        return [a for a in self.attempts.get(key, []) if may_have_been_accepted(a)]

    def next_resend_key(self) -> str:
        numbers = [
            int(match.group(1))
            for key in self.rows
            if (match := RESEND_SUFFIX.search(key)) and base_key(key) == self.base
        ]
        return f"{resend_prefix(self.key)}{max(numbers, default=0) + 1}"


def read_family(conn: Connection, key: str) -> Family:
    """Lock the family of ``key`` and its row, and read it; Refused when the key is unknown."""
    conn.execute(
        _REVIEW["lock_receipt_family"],
        {"lock_space": _DECISION_LOCK_SPACE, "base": base_key(key)},
    )
    row: dict[str, Any] | None = conn.execute(_REVIEW["lock_receipt"], {"key": key}).fetchone()
    if row is None:
        raise Refused(f"no receipt with message key {key!r}")
    rows = {
        found["message_key"]: found
        for found in conn.execute(
            _REVIEW["family_rows"],
            {"invoice_id": row["invoice_id"], "base": base_key(key), "prefix": resend_prefix(key)},
        )
    }
    rows[key] = {**rows.get(key, {}), **row}
    keys = sorted(rows)
    attempts: dict[str, list[dict[str, Any]]] = {}
    for attempt in conn.execute(_REVIEW["family_attempts"], {"keys": keys}):
        attempts.setdefault(attempt["message_key"], []).append(attempt)
    actions: dict[str, list[dict[str, Any]]] = {}
    for action in conn.execute(_REVIEW["family_actions"], {"keys": keys}):
        actions.setdefault(action["message_key"], []).append(action)
    return Family(
        key=key,
        row=row,
        rows=rows,
        attempts=attempts,
        actions=actions,
        evidence=evidence_of_unrecorded_sends(conn, keys),
    )


# --- what changed, and when: the words of the refusals ------------------------------


def when(moment: datetime | None) -> str:
    """``2026-12-01 10:02 UTC``."""
    if moment is None:
        return "an unknown time"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _then(moment: datetime | None, since: datetime | None) -> str:
    """``10:03`` on the same UTC day as ``since``, else the whole time."""
    if moment is None or since is None:
        return when(moment)
    if moment.astimezone(UTC).date() == since.astimezone(UTC).date():
        return moment.astimezone(UTC).strftime("%H:%M")
    return when(moment)


def progress(family: Family, key: str, since: datetime | None = None) -> str:
    """Where a row is now, in a few words: ``sent 10:03``, ``pending``, ``in review: …``."""
    row = family.rows.get(key)
    if row is None:
        return "no longer stored"
    if row["status"] == RowStatus.SENT:
        sent = f"sent {_then(row['sent_at'], since)}"
        return sent + (f", provider id {row['provider_id']}" if row["provider_id"] else "")
    if row["status"] == RowStatus.PROCESSING:
        return "being sent by a worker now"
    if row["status"] == RowStatus.PENDING:
        return "pending: on its way to the provider"
    return f"in review: {row['review_reason']}"


def resent_phrase(family: Family, key: str, resend: str) -> str:
    """``KEY was resent as KEY/resend-1 at … by alice (sent 10:03)``."""
    action = family.last_action(key, "resend")
    if action is None or action["details"].get("new_key") != resend:
        action = family.last_action(resend, "resend_created")
    at = action["performed_at"] if action else None
    by = f" by {action['performed_by']}" if action else ""
    return f"{key} was resent as {resend} at {when(at)}{by} ({progress(family, resend, at)})"


def state_phrase(family: Family, key: str) -> str:
    """What ``key`` is now and who or what made it so: the start of a refusal."""
    row = family.rows[key]
    status = row["status"]
    if status == RowStatus.SENT:
        return _sent_phrase(family, key)
    if status == RowStatus.PROCESSING:
        return f"{key} is processing: a worker is sending it right now"
    if status == RowStatus.PENDING:
        return _pending_phrase(family, key)
    if row["resent_as"]:
        return resent_phrase(family, key, row["resent_as"])
    if row["review_reason"] == ReviewReason.DISMISSED:
        dismissal = family.last_action(key, "dismiss")
        if dismissal is None:
            return f"{key} was dismissed"
        return (
            f"{key} was dismissed at {when(dismissal['performed_at'])} by "
            f"{dismissal['performed_by']} ({dismissal['reason']!r})"
        )
    return f"{key} is in review ({row['review_reason']})"


def _sent_phrase(family: Family, key: str) -> str:
    row = family.rows[key]
    sent = f"{key} was sent at {when(row['sent_at'])}"
    if row["provider_id"]:
        sent += f" (provider id {row['provider_id']})"
    if row["delivery_status"] in NOT_DELIVERED:
        sent += f", but Resend reported it {row['delivery_status']}: the customer did not get it"
    resolved = family.last_action(key, "resolve")
    if resolved is not None:
        sent += (
            f", as {resolved['performed_by']} recorded at {when(resolved['performed_at'])} "
            "(review resolve)"
        )
    return sent


def _pending_phrase(family: Family, key: str) -> str:
    last = family.last_action(key, "retry", "resend_created")
    if last is not None and last["action"] == "retry":
        return (
            f"{key} is pending: {last['performed_by']} retried it at {when(last['performed_at'])}"
        )
    if last is not None:
        return (
            f"{key} is pending: {last['performed_by']} queued it at "
            f"{when(last['performed_at'])} as a resend of {last['details'].get('resend_of')}"
        )
    return f"{key} is pending: it is on its way to the provider"


def attempt_phrase(key: str, attempt: dict[str, Any]) -> str:
    """``attempt #1 of KEY at … may have reached the provider (no answer)``."""
    if attempt["finished_at"] is None and attempt["outcome"] is None:
        how = "its worker died mid-send"
    elif attempt["http_status"] is None:
        how = "no answer: a timeout or a lost connection"
    else:
        how = f"HTTP {attempt['http_status']}"
    return (
        f"attempt #{attempt['attempt']} of {key} at {when(attempt['started_at'])} may have "
        f"reached the provider ({how})"
    )


def evidence_phrase(key: str, send: dict[str, Any]) -> str:
    return (
        f"Resend reported sending {key} as email {send['email_id']} at "
        f"{when(send['accepted_at'])}, which no receipt recorded"
    )
