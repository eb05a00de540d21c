"""Record receipts an earlier system already sent, so they are never sent again.

``receipts import FILE.csv`` reads ``invoice_id,account,mode,sent_at,provider_id``
(header required) and stores each line as a ``sent`` outbox row under the key
ingest would compute. A later ``invoice.paid`` for that invoice then finds the
key taken and queues nothing: ingest treats any event for an imported row
(fingerprint ``imported:…``) as a duplicate.

All or nothing: every malformed line is reported by number and nothing is
stored. A key already present as ``sent`` is skipped and reported; a key
present in any other state (this system is about to send it, or a person must
decide) stops the import, because the customer would get two receipts.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from receipts.db import Connection
from receipts.ingest.events import MalformedEvent
from receipts.ingest.receipt import message_key
from receipts.operations.review import Decider
from receipts.vocabulary import IMPORTED_FINGERPRINT_PREFIX, PURPOSE

COLUMNS = ("invoice_id", "account", "mode", "sent_at", "provider_id")
IMPORTED_SOURCE_EVENT = "import"

_INVOICE_ID = re.compile(r"in_[A-Za-z0-9_]{1,200}")
_ACCOUNT = re.compile(r"platform|acct_[A-Za-z0-9_]{1,200}")
_PROVIDER_ID = re.compile(r"[\x21-\x7e]{1,200}")
_CLOCK_SKEW = timedelta(minutes=5)


class ImportRejected(Exception):
    """The file cannot be imported; ``problems`` lists every reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(f"{len(problems)} problem(s)")
        self.problems = problems


@dataclass(frozen=True, kw_only=True)
class SentReceipt:
    line: int
    message_key: str
    invoice_id: str
    account: str
    livemode: bool
    sent_at: datetime
    provider_id: str | None


@dataclass(frozen=True, kw_only=True)
class ImportReport:
    imported: list[str]
    skipped: list[tuple[int, str]]  # (line, key) already recorded as sent


def parse_csv(text: str, *, now: datetime | None = None) -> list[SentReceipt]:
    """Every line as a SentReceipt, or ImportRejected naming every bad line."""
    now = now or datetime.now(UTC)
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or tuple(name.strip().lower() for name in header) != COLUMNS:
        raise ImportRejected([f"line 1: the header must be exactly {','.join(COLUMNS)}"])
    receipts: list[SentReceipt] = []
    problems: list[str] = []
    first_line_of_key: dict[str, int] = {}
    for fields in reader:
        line = reader.line_num
        if not any(field.strip() for field in fields):
            continue
        try:
            receipt = _parse_line(line, fields, now)
        except ValueError as problem:
            problems.append(f"line {line}: {problem}")
            continue
        earlier = first_line_of_key.setdefault(receipt.message_key, line)
        if earlier != line:
            problems.append(f"line {line}: same receipt as line {earlier} ({receipt.message_key})")
            continue
        receipts.append(receipt)
    if problems:
        raise ImportRejected(problems)
    return receipts


def _parse_line(line: int, fields: list[str], now: datetime) -> SentReceipt:
    if len(fields) != len(COLUMNS):
        raise ValueError(f"expected {len(COLUMNS)} fields, got {len(fields)}")
    invoice_id, account, mode, sent_at_text, provider_id = (field.strip() for field in fields)
    if not _INVOICE_ID.fullmatch(invoice_id):
        raise ValueError(f"invoice_id {invoice_id!r} is not a Stripe invoice id (in_…)")
    if not _ACCOUNT.fullmatch(account):
        raise ValueError(f"account {account!r} must be 'platform' or a Connect id (acct_…)")
    if mode not in ("live", "test"):
        raise ValueError(f"mode {mode!r} must be live or test")
    sent_at = _sent_at(sent_at_text, now)
    if provider_id and not _PROVIDER_ID.fullmatch(provider_id):
        raise ValueError("provider_id must be printable ASCII without spaces, 200 at most")
    try:
        key = message_key(account, mode == "live", invoice_id)
    except MalformedEvent as exc:
        raise ValueError(str(exc)) from None
    return SentReceipt(
        line=line,
        message_key=key,
        invoice_id=invoice_id,
        account=account,
        livemode=mode == "live",
        sent_at=sent_at,
        provider_id=provider_id or None,
    )


def _sent_at(text: str, now: datetime) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"sent_at {text!r} is not an ISO 8601 time") from None
    if value.tzinfo is None:
        raise ValueError(f"sent_at {text!r} has no UTC offset (add Z or +00:00)")
    if value > now + _CLOCK_SKEW:
        raise ValueError(f"sent_at {text!r} is in the future")
    return value


def import_sent(
    conn: Connection, receipts: list[SentReceipt], decider: Decider, *, source: str
) -> ImportReport:
    """Insert the receipts as ``sent`` rows in the caller's transaction."""
    conn.execute(
        """CREATE TEMPORARY TABLE import_rows (
               line integer, message_key text, account text, livemode boolean,
               invoice_id text, sent_at timestamptz, provider_id text) ON COMMIT DROP"""
    )
    with conn.cursor().copy(
        "COPY import_rows (line, message_key, account, livemode, invoice_id, sent_at, provider_id)"
        " FROM STDIN"
    ) as copy:
        for r in receipts:
            copy.write_row(
                (
                    r.line,
                    r.message_key,
                    r.account,
                    r.livemode,
                    r.invoice_id,
                    r.sent_at,
                    r.provider_id,
                )
            )
    inserted = {
        row["message_key"]
        for row in conn.execute(
            """INSERT INTO email_outbox
                   (message_key, purpose, account, livemode, invoice_id, source_event_id,
                    fingerprint, payload, status, provider_id, sent_at)
               SELECT message_key, %s, account, livemode, invoice_id, %s,
                      %s || message_key, NULL, 'sent', provider_id, sent_at
               FROM import_rows ORDER BY line
               ON CONFLICT (message_key) DO NOTHING
               RETURNING message_key""",
            (PURPOSE, IMPORTED_SOURCE_EVENT, IMPORTED_FINGERPRINT_PREFIX),
        )
    }
    skipped = _check_existing(conn, receipts, inserted)
    conn.execute(
        """INSERT INTO operator_actions (message_key, action, performed_by, reason, details)
           SELECT message_key, 'import', %s, %s,
                  jsonb_build_object('file', %s::text, 'line', line, 'provider_id', provider_id)
           FROM import_rows WHERE message_key = ANY(%s)""",
        (decider.performed_by, decider.reason, source, sorted(inserted)),
    )
    return ImportReport(
        imported=[r.message_key for r in receipts if r.message_key in inserted],
        skipped=skipped,
    )


def _check_existing(
    conn: Connection, receipts: list[SentReceipt], inserted: set[str]
) -> list[tuple[int, str]]:
    """Keys that were already there: fine if sent, a stop otherwise."""
    line_of = {r.message_key: r.line for r in receipts if r.message_key not in inserted}
    if not line_of:
        return []
    existing = conn.execute(
        "SELECT message_key, status FROM email_outbox WHERE message_key = ANY(%s)",
        (list(line_of),),
    ).fetchall()
    blocking = sorted(
        (line_of[row["message_key"]], row["message_key"], row["status"])
        for row in existing
        if row["status"] != "sent"
    )
    if blocking:
        raise ImportRejected(
            [
                f"line {line}: {key} is already {status} here, so the customer could get two "
                "receipts; decide it first (`receipts show`)"
                for line, key, status in blocking
            ]
        )
    return sorted((line_of[row["message_key"]], row["message_key"]) for row in existing)
