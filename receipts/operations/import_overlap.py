"""What ``receipts import`` finds already here for a key of its file, and what that means.

A key of the file that has a row already is one of:

* imported before (rerunning a file): skipped;
* sent by receipts itself (the row, or the resend that settled it, is
  ``sent`` with the provider's id from our own attempt): reported as "already
  sent by receipts at … (provider id …)"; when the file names another
  provider id, the customer got two emails: *sent twice*, reported with both
  sends, recorded on the receipt, and the import exits 1 so a person can
  apologise;
* dismissed here with no email sent: skipped;
* on its way here, or waiting for a person: the import stops, since the
  customer would get two receipts (decide it first).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from receipts import queries
from receipts.db import Connection
from receipts.operations.receipt_family import when
from receipts.operations.review import Decider
from receipts.vocabulary import IMPORTED_FINGERPRINT_PREFIX, ReviewReason, RowStatus

_IMPORTS = queries.load("imports")


@dataclass(frozen=True, kw_only=True)
class Line:
    """One line of the file whose key has a row: what the file says was sent."""

    line: int
    message_key: str
    sent_at: datetime
    provider_id: str | None


@dataclass(frozen=True, kw_only=True)
class Overlap:
    """A line whose key has a row, and what the import says about it."""

    line: int
    message_key: str
    note: str
    sent_twice: bool = False
    blocks: bool = False  # the import stops: the row is on its way or waits for a person


def overlaps(
    conn: Connection, lines: list[Line], decider: Decider, *, source: str
) -> list[Overlap]:
    """Each line's overlap, in line order; a receipt sent twice is recorded on it."""
    if not lines:
        return []
    existing = {
        row["message_key"]: row
        for row in conn.execute(
            _IMPORTS["existing_receipts"],
            {
                "keys": [line.message_key for line in lines],
                "imported_prefix": IMPORTED_FINGERPRINT_PREFIX,
            },
        )
    }
    found = []
    for line in sorted(lines, key=lambda line: line.line):
        row = existing.get(line.message_key)
        if row is None:
            continue
        overlap = _overlap(line, row)
        if overlap.sent_twice:
            _record_sent_twice(conn, line, row, decider, source)
        found.append(overlap)
    return found


def _overlap(line: Line, row: dict[str, Any]) -> Overlap:
    key = line.message_key
    if row["status"] == RowStatus.SENT and row["imported"]:
        return Overlap(line=line.line, message_key=key, note=_imported_note(line, row))
    ours = _our_send(row)
    if ours is not None:
        return _ours(line, ours)
    if (
        row["status"] == RowStatus.REVIEW
        and row["review_reason"] == ReviewReason.DISMISSED
        and not row["resent_as"]
    ):
        return Overlap(
            line=line.line,
            message_key=key,
            note=f"{key} was dismissed here: receipts sent no email for it; skipped",
        )
    state = f"{row['status']} here"
    if row["resent_as"]:
        state = f"resent here as {row['resent_as']}, which is {row['resend_status'] or 'gone'}"
    return Overlap(
        line=line.line,
        message_key=key,
        note=f"{key} is already {state}, so the customer could get two receipts; "
        "decide it first (`receipts show`)",
        blocks=True,
    )


def _imported_note(line: Line, row: dict[str, Any]) -> str:
    note = f"{line.message_key} was imported before"
    if row["provider_id"] and line.provider_id and row["provider_id"] != line.provider_id:
        note += f" with provider id {row['provider_id']} (this line says {line.provider_id})"
    return note + "; skipped"


@dataclass(frozen=True, kw_only=True)
class _OurSend:
    key: str
    sent_at: datetime | None
    provider_id: str | None


def _our_send(row: dict[str, Any]) -> _OurSend | None:
    """The email this system sent for the receipt: the row's own, or its resend's."""
    if row["status"] == RowStatus.SENT:
        return _OurSend(
            key=row["message_key"], sent_at=row["sent_at"], provider_id=row["provider_id"]
        )
    if row["resent_as"] and row["resend_status"] == RowStatus.SENT:
        return _OurSend(
            key=row["resent_as"],
            sent_at=row["resend_sent_at"],
            provider_id=row["resend_provider_id"],
        )
    return None


def _ours(line: Line, ours: _OurSend) -> Overlap:
    sent = f"at {when(ours.sent_at)} (provider id {ours.provider_id or 'unknown'})"
    as_key = f" as {ours.key}" if ours.key != line.message_key else ""
    if line.provider_id and line.provider_id != ours.provider_id:
        return Overlap(
            line=line.line,
            message_key=line.message_key,
            note=f"{line.message_key} was sent twice: ours{as_key} {sent} and the imported one "
            f"at {when(line.sent_at)} (provider id {line.provider_id}); the customer got two "
            "receipts",
            sent_twice=True,
        )
    note = f"{line.message_key} was already sent by receipts{as_key} {sent}"
    if not line.provider_id:
        note += (
            "; the file gives no provider id, so look it up in the earlier sender's log: if it "
            "sent one too, the customer got two"
        )
    return Overlap(line=line.line, message_key=line.message_key, note=note + "; skipped")


def _record_sent_twice(
    conn: Connection, line: Line, row: dict[str, Any], decider: Decider, source: str
) -> None:
    ours = _our_send(row)
    assert ours is not None
    details = {
        "file": source,
        "line": line.line,
        "ours": {
            "key": ours.key,
            "provider_id": ours.provider_id,
            "sent_at": ours.sent_at.isoformat() if ours.sent_at else None,
        },
        "imported": {"provider_id": line.provider_id, "sent_at": line.sent_at.isoformat()},
    }
    conn.execute(
        _IMPORTS["record_sent_twice"],
        {
            "key": line.message_key,
            "performed_by": decider.performed_by,
            "reason": decider.reason,
            "details": Jsonb(details),
        },
    )
