"""The database side of ingest: record one verified delivery and its outbox row.

Ingest is one transaction per delivery. The outbox row is inserted once per
message key (a second insert of the key does nothing), so concurrent
deliveries, redeliveries and different events about the same invoice all
collapse onto one row; the event row counts deliveries and records what each
event meant. The statements are the ``ingest_event``, ``insert_outbox_row``,
``outbox_fingerprint`` and ``record_stripe_event`` queries of
``receipts/queries/ingest.sql``; ``docs/architecture.md`` tells the data flow.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from psycopg.types.json import Json

from receipts import queries
from receipts.db import Connection
from receipts.message_keys import CREDIT_NOTE_PREFIX, parse_message_key
from receipts.receipt.derivation import (
    Decision,
    Ignored,
    OneDecision,
    ReceiptJob,
    Several,
    UnsendableReceipt,
)
from receipts.receipt.event import EventHeader
from receipts.receipt.invoice_summary import InvoiceSummary, summarize
from receipts.receipt.refunds import REFUND_ALREADY_EMAILED, REFUND_IN_CREDIT_NOTE
from receipts.vocabulary import IMPORTED_FINGERPRINT_PREFIX, IngestOutcome, RowStatus

_Q = queries.load("ingest")


@dataclass(frozen=True, kw_only=True)
class IngestResult:
    """What one delivery did: its outcome, and whether it was a redelivery."""

    event_id: str
    outcome: IngestOutcome
    message_key: str | None
    redelivery: bool
    detail: str | None = None


def ingest(conn: Connection, header: EventHeader, decision: Decision) -> IngestResult:
    """Record one verified delivery and, for a paid invoice, its outbox row.

    One statement does it all on every common path (a new row, a redelivery,
    a duplicate or conflict of a committed row), so on an autocommit
    connection a delivery costs one round trip and is atomic. Only when the
    row was committed by a concurrent delivery after that statement's snapshot
    was taken can it not tell duplicate from conflict; it then stores nothing
    and the delivery is recorded by separate statements in one transaction,
    which do see that row.

    Refund receipts and credit notes (``claims``), and an event that means
    several emails (:class:`Several`), are stored by :func:`_ingest_claiming`.
    """
    if isinstance(decision, Several):
        return _ingest_claiming(conn, header, decision.decisions)
    if not isinstance(decision, Ignored) and decision.claims:
        return _ingest_claiming(conn, header, (decision,))
    if isinstance(decision, Ignored):
        summary = summarize(header.data_object, None)
        return _record_event(
            conn, header, IngestOutcome.IGNORED, None, None, decision.reason, summary
        )
    detail = decision.reason if isinstance(decision, UnsendableReceipt) else None
    result = _ingest_in_one_statement(conn, header, decision, detail)
    if result is not None:
        return result
    with conn.transaction():
        outcome = _insert_outbox_row(conn, header, decision)
        return _record_event(
            conn,
            header,
            outcome,
            decision.message_key,
            decision.fingerprint,
            detail,
            _summary(header, decision),
        )


def _ingest_in_one_statement(
    conn: Connection,
    header: EventHeader,
    decision: ReceiptJob | UnsendableReceipt,
    detail: str | None,
) -> IngestResult | None:
    """Insert row and event in one statement; None if the row's outcome is not yet visible."""
    row = conn.execute(
        _Q["ingest_event"],
        {
            **_outbox_row(header, decision),
            **_books_copy_columns(decision),
            "event_type": header.event_type,
            "new_outcome": _new_row_outcome(decision),
            "imported_prefix": IMPORTED_FINGERPRINT_PREFIX,
            "detail": detail,
        },
    ).fetchone()
    if row is None:
        return None
    return _result(header, row)


def _summary(header: EventHeader, decision: ReceiptJob | UnsendableReceipt) -> InvoiceSummary:
    """The invoice's summary; a refund's or credit note's own amount as the row's amount."""
    recipients = {"to": [decision.recipient]} if isinstance(decision, ReceiptJob) else None
    invoice = decision.render_input.get("invoice")
    summary = summarize(invoice if isinstance(invoice, dict) else header.data_object, recipients)
    kind = decision.render_input.get("kind")
    document = decision.render_input.get(kind) if isinstance(kind, str) else None
    if isinstance(document, dict):
        amount = document.get("total", document.get("amount"))
        usable = isinstance(amount, int) and not isinstance(amount, bool)
        return replace(summary, amount=amount if usable else None)
    return summary


@dataclass(frozen=True, kw_only=True)
class _Stored:
    """What storing one of an event's decisions did."""

    outcome: IngestOutcome
    key: str | None
    fingerprint: str | None
    detail: str | None
    summary: InvoiceSummary


# Which of an event's decisions its stripe_events row tells, first first.
_TOLD_FIRST = (
    IngestOutcome.QUEUED,
    IngestOutcome.REVIEW,
    IngestOutcome.CONFLICT,
    IngestOutcome.DUPLICATE,
    IngestOutcome.IGNORED,
)


def _ingest_claiming(
    conn: Connection, header: EventHeader, decisions: tuple[OneDecision, ...]
) -> IngestResult:
    """Store each decision's row with its refund claims, and the event, in one transaction.

    A refund has one email: the first row to commit a claim on a refund id
    owns it (``refund_claims``' primary key; a concurrent claim waits for that
    commit), and a later email about the same refund under another key is
    recorded as ignored, with the owner's key, and gets no row.
    """
    with conn.transaction():
        stored = [_store_claiming(conn, header, one) for one in decisions]
        told = min(stored, key=lambda one: _TOLD_FIRST.index(one.outcome))
        return _record_event(
            conn, header, told.outcome, told.key, told.fingerprint, told.detail, told.summary
        )


def _store_claiming(conn: Connection, header: EventHeader, decision: OneDecision) -> _Stored:
    if isinstance(decision, Ignored):
        summary = summarize(header.data_object, None)
        return _Stored(outcome=IngestOutcome.IGNORED, key=None, fingerprint=None,
                       detail=decision.reason, summary=summary)  # fmt: skip
    summary = _summary(header, decision)
    lost = _claim_refunds(conn, decision)
    if lost is not None:
        reason, owner = lost
        return _Stored(outcome=IngestOutcome.IGNORED, key=owner, fingerprint=None,
                       detail=reason, summary=summary)  # fmt: skip
    outcome = _insert_outbox_row(conn, header, decision)
    detail = decision.reason if isinstance(decision, UnsendableReceipt) else None
    return _Stored(outcome=outcome, key=decision.message_key, fingerprint=decision.fingerprint,
                   detail=detail, summary=summary)  # fmt: skip


def _claim_refunds(
    conn: Connection, decision: ReceiptJob | UnsendableReceipt
) -> tuple[str, str] | None:
    """Claim the refunds the email tells about; (why not, the owner's key) if it must not be sent.

    A refund receipt loses when its refund is claimed by another key (the
    credit note carrying it). A credit note loses only when every refund it
    carries was emailed already; otherwise it tells about its lines and the
    refunds it could claim.
    """
    if not decision.claims:
        return None
    ids = {"key": decision.message_key, "refund_ids": sorted(decision.claims)}
    conn.execute(_Q["claim_refunds"], ids)
    owners = [row["message_key"] for row in conn.execute(_Q["refund_claim_owners"], ids)]
    others = [owner for owner in owners if owner != decision.message_key]
    if not others:
        return None
    if decision.purpose.startswith(CREDIT_NOTE_PREFIX):
        return (REFUND_ALREADY_EMAILED, others[0]) if len(others) == len(owners) else None
    by_credit_note = parse_message_key(others[0]).purpose.startswith(CREDIT_NOTE_PREFIX)
    return (REFUND_IN_CREDIT_NOTE if by_credit_note else REFUND_ALREADY_EMAILED), others[0]


def _outbox_row(header: EventHeader, decision: ReceiptJob | UnsendableReceipt) -> dict[str, Any]:
    """The parameters of a new outbox row: pending, or review with its reason, both with
    what the worker renders the email from (a review row keeps it for a resend to a
    corrected address), and what support looks it up by (invoice number, customer
    address, amount)."""
    job = decision if isinstance(decision, ReceiptJob) else None
    return {
        **_summary(header, decision).columns(),
        "key": decision.message_key,
        "purpose": decision.purpose,
        "account": header.account,
        "livemode": header.livemode,
        "invoice_id": decision.invoice_id,
        "event_id": header.event_id,
        "fingerprint": decision.fingerprint,
        "legacy_fingerprint": decision.legacy_fingerprint,
        "render_input": Json(decision.render_input),
        "status": RowStatus.PENDING if job else RowStatus.REVIEW,
        "review_reason": decision.reason if isinstance(decision, UnsendableReceipt) else None,
    }


def _books_copy_columns(decision: ReceiptJob | UnsendableReceipt) -> dict[str, Any]:
    """The copy for the books' own columns; all None when the receipt has no copy."""
    copy = decision.books_copy if isinstance(decision, ReceiptJob) else None
    return {
        "copy_key": copy.message_key if copy else None,
        "copy_purpose": copy.purpose if copy else None,
        "copy_fingerprint": copy.fingerprint if copy else None,
        "copy_render_input": Json(copy.render_input) if copy else None,
        "copy_to": copy.recipient if copy else None,
    }


def _insert_books_copy(conn: Connection, header: EventHeader, job: ReceiptJob) -> None:
    """The copy's row, beside a customer row just inserted."""
    copy = job.books_copy
    if copy is None:
        return
    conn.execute(
        _Q["insert_outbox_row"],
        {
            **_outbox_row(header, job),
            "key": copy.message_key,
            "purpose": copy.purpose,
            "fingerprint": copy.fingerprint,
            "render_input": Json(copy.render_input),
            "customer_email": copy.recipient,
        },
    )


def _new_row_outcome(decision: ReceiptJob | UnsendableReceipt) -> IngestOutcome:
    return IngestOutcome.QUEUED if isinstance(decision, ReceiptJob) else IngestOutcome.REVIEW


def _insert_outbox_row(
    conn: Connection, header: EventHeader, decision: ReceiptJob | UnsendableReceipt
) -> IngestOutcome:
    """Insert the row, or classify the existing one as duplicate or conflict."""
    inserted = conn.execute(_Q["insert_outbox_row"], _outbox_row(header, decision)).fetchone()
    if inserted is not None:
        if isinstance(decision, ReceiptJob):
            _insert_books_copy(conn, header, decision)
        # No NOTIFY here: it would serialize every commit (see receipts.ingest.wakeup);
        # the caller wakes the workers after the commit.
        return _new_row_outcome(decision)
    existing = conn.execute(_Q["outbox_fingerprint"], {"key": decision.message_key}).fetchone()
    # A receipt imported from an earlier sender (`receipts import`) was sent
    # already: any event for it is a duplicate, not a conflict.
    if existing is not None and (
        existing["fingerprint"] in (decision.fingerprint, decision.legacy_fingerprint)
        or existing["fingerprint"].startswith(IMPORTED_FINGERPRINT_PREFIX)
    ):
        return IngestOutcome.DUPLICATE
    return IngestOutcome.CONFLICT


def _record_event(
    conn: Connection,
    header: EventHeader,
    outcome: IngestOutcome,
    key: str | None,
    fingerprint: str | None,
    detail: str | None,
    summary: InvoiceSummary,
) -> IngestResult:
    """Insert the event, or count one more delivery of it and keep its first outcome."""
    row = conn.execute(
        _Q["record_stripe_event"],
        {
            "invoice_id": summary.invoice_id,
            "invoice_number": summary.number,
            "customer_email": summary.customer_email,
            "event_id": header.event_id,
            "event_type": header.event_type,
            "account": header.account,
            "livemode": header.livemode,
            "outcome": outcome,
            "detail": detail,
            "key": key,
            "fingerprint": fingerprint,
        },
    ).fetchone()
    assert row is not None
    return _result(header, row)


def _result(header: EventHeader, event_row: dict[str, Any]) -> IngestResult:
    """The event row as stored: its first outcome, and whether this was a redelivery."""
    return IngestResult(
        event_id=header.event_id,
        outcome=IngestOutcome(event_row["outcome"]),
        message_key=event_row["message_key"],
        redelivery=not event_row["first_delivery"],
        detail=event_row["detail"],
    )
