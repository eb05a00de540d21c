"""Record receipts an earlier system already sent, so they are never sent again.

``receipts import FILE.csv`` reads ``invoice_id,account,mode,sent_at,provider_id``
(header required) and stores each line as a ``sent`` outbox row under the key
ingest would compute. A later ``invoice.paid`` for that invoice then finds the
key taken and queues nothing: ingest treats any event for an imported row
(fingerprint ``imported:…``) as a duplicate.

All or nothing: every malformed line is reported by number and nothing is
stored. A key already present is skipped and reported for what it is
(:mod:`receipts.operations.import_overlap`): imported before, sent by
receipts itself (and *sent twice* when the file names another provider id),
or dismissed; a key this system is about to send, or a person must decide,
stops the import, because the customer would get two receipts. The
statements are in ``receipts/queries/imports.sql``; why an imported key turns
every later event into a duplicate is in ``docs/architecture.md``.
"""

from __future__ import annotations

import csv
import io
import re
from _csv import Reader
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from receipts import queries
from receipts.db import Connection
from receipts.message_keys import INVOICE_PAID, InvalidMessageKey, message_key
from receipts.operations.import_overlap import Line, Overlap, overlaps
from receipts.operations.operator_input import parse_sent_at, shown
from receipts.operations.review import Decider
from receipts.vocabulary import IMPORTED_FINGERPRINT_PREFIX

_IMPORTS = queries.load("imports")

COLUMNS = ("invoice_id", "account", "mode", "sent_at", "provider_id")
IMPORTED_SOURCE_EVENT = "import"

_INVOICE_ID = re.compile(r"in_[A-Za-z0-9_]{1,200}")
_ACCOUNT = re.compile(r"platform|acct_[A-Za-z0-9_]{1,200}")
_PROVIDER_ID = re.compile(r"[\x21-\x7e]{1,200}")


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
    already_here: list[Overlap]  # lines whose key had a row: skipped, each with why

    @property
    def sent_twice(self) -> list[Overlap]:
        """Receipts this system sent that the file says the earlier sender sent too."""
        return [overlap for overlap in self.already_here if overlap.sent_twice]


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
    for line, fields in _lines(reader, problems):
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


def _lines(reader: Reader, problems: list[str]) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each record; a line the reader cannot split ends the
    file with one problem (the rest cannot be split reliably after it)."""
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            problems.append(f"line {reader.line_num}: {_csv_problem(exc)}")
            return
        yield reader.line_num, fields


def _csv_problem(exc: csv.Error) -> str:
    if "field limit" in str(exc):
        return f"a field is longer than {csv.field_size_limit()} characters"
    return f"not readable as CSV ({exc})"


def _parse_line(line: int, fields: list[str], now: datetime) -> SentReceipt:
    if len(fields) != len(COLUMNS):
        raise ValueError(f"expected {len(COLUMNS)} fields, got {len(fields)}")
    invoice_id, account, mode, sent_at_text, provider_id = (field.strip() for field in fields)
    if not _INVOICE_ID.fullmatch(invoice_id):
        raise ValueError(f"invoice_id {shown(invoice_id)} is not a Stripe invoice id (in_…)")
    if not _ACCOUNT.fullmatch(account):
        raise ValueError(f"account {shown(account)} must be 'platform' or a Connect id (acct_…)")
    if mode not in ("live", "test"):
        raise ValueError(f"mode {shown(mode)} must be live or test")
    sent_at = parse_sent_at(sent_at_text, label="sent_at", now=now)
    if provider_id and not _PROVIDER_ID.fullmatch(provider_id):
        raise ValueError("provider_id must be printable ASCII without spaces, 200 at most")
    try:
        key = message_key(account, mode == "live", invoice_id)
    except InvalidMessageKey as exc:
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


def import_sent(
    conn: Connection, receipts: list[SentReceipt], decider: Decider, *, source: str
) -> ImportReport:
    """Insert the receipts as ``sent`` rows in the caller's transaction."""
    conn.execute(_IMPORTS["create_import_rows"])
    with conn.cursor().copy(_IMPORTS["copy_import_rows"]) as copy:
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
            _IMPORTS["insert_imported_rows"],
            {
                "purpose": INVOICE_PAID,
                "source_event_id": IMPORTED_SOURCE_EVENT,
                "fingerprint_prefix": IMPORTED_FINGERPRINT_PREFIX,
            },
        )
    }
    found = _check_existing(conn, receipts, inserted, decider, source)
    conn.execute(
        _IMPORTS["record_import_actions"],
        {
            "performed_by": decider.performed_by,
            "reason": decider.reason,
            "file": source,
            "keys": sorted(inserted),
        },
    )
    return ImportReport(
        imported=[r.message_key for r in receipts if r.message_key in inserted],
        already_here=found,
    )


def _check_existing(
    conn: Connection,
    receipts: list[SentReceipt],
    inserted: set[str],
    decider: Decider,
    source: str,
) -> list[Overlap]:
    """Keys that were already here: each said for what it is; a stop when one is on its way."""
    lines = [
        Line(line=r.line, message_key=r.message_key, sent_at=r.sent_at, provider_id=r.provider_id)
        for r in receipts
        if r.message_key not in inserted
    ]
    found = overlaps(conn, lines, decider, source=source)
    blocking = [overlap for overlap in found if overlap.blocks]
    if blocking:
        raise ImportRejected([f"line {overlap.line}: {overlap.note}" for overlap in blocking])
    return found
