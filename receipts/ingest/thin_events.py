"""Thin event notifications: store first, fetch the invoice, then ingest like a snapshot.

A thin notification (``"object": "v2.core.event"``, type ``v1.invoice.paid``)
names the paid invoice in ``related_object`` and the Connect account in
``context``, and carries nothing else. Once its signature is verified (the
same secrets as every Stripe delivery) and the library's
``parse_event_notification`` has read it:

1. it is stored in ``stripe_thin_events`` and committed, so it is never lost;
2. the invoice is fetched from the API (with the notification's context) and
   goes through the same derivation as a snapshot ``invoice.paid``, so both
   formats of one invoice give one message key and one email;
3. one transaction records the event and the outbox row and marks the
   notification resolved.

:meth:`ThinEvents.receive` returns a :class:`ThinOutcome`: ``recorded`` (the
web answers 200), or ``pending`` when the API cannot be reached, refuses our
key, or no key is configured, and ``unavailable`` when the database is down
(both answered 503, so Stripe redelivers for up to three days and each
redelivery tries again). :meth:`ThinEvents.resolve_pending` is the sweep
``receipts backfill`` runs over whatever is still pending after that. An
invoice the API does not know in the notification's account, or one that is
not paid, is recorded as ignored with its reason.

A snapshot event whose look-ups ran past its request's budget (thousands of
invoice lines on a slow API) waits in the same table: :meth:`ThinEvents.hold`
stores it as Stripe sent it (answered 503, so Stripe sends it again), and the
sweep derives it with every look-up and no budget, storing the whole receipt.
Nothing is stored from what the budget cut short.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import stripe
from psycopg.types.json import Jsonb

from receipts import queries
from receipts.db import Database, DatabaseUnavailable
from receipts.ingest.deriving import ReceiptDeriver
from receipts.ingest.store import IngestResult, ingest
from receipts.ingest.thin_notifications import (
    INVOICE_PAID,
    PARSE_ONLY_KEY,
    THIN_OBJECT,
    Notification,
    parse,
)
from receipts.ingest.verification import RejectedDelivery
from receipts.ingest.wakeup import WakeUp
from receipts.logs import log_fields
from receipts.receipt.derivation import Decision, Ignored
from receipts.receipt.event import EventHeader, MalformedEvent, parse_event
from receipts.stripe_api.client import ApiError, ApiRefused, NotFound, OutOfTime
from receipts.vocabulary import IngestOutcome

log = logging.getLogger(__name__)


class ThinState(StrEnum):
    """Where one received notification stands."""

    RECORDED = "recorded"  # its event (and outbox row) are stored: done
    PENDING = "pending"  # stored, the invoice not yet fetched: a redelivery tries again
    UNAVAILABLE = "unavailable"  # the database could not store it


@dataclass(frozen=True, kw_only=True)
class ThinOutcome:
    """What receiving one thin notification did."""

    state: ThinState
    event_id: str
    event_type: str
    # The ingest outcome when recorded; why it is pending otherwise (``no_api_key``…).
    outcome: str
    message_key: str | None = None
    redelivery: bool = False
    detail: str | None = None  # why it is pending or unavailable, for the answer


@dataclass
class SweepReport:
    """What ``resolve_pending`` did."""

    outcomes: Counter[str] = field(default_factory=Counter)
    stopped: str | None = None  # why the sweep stopped early (the API failed)


class ThinEvents:
    """Receives, stores and resolves thin notifications with one deriver."""

    def __init__(
        self, database: Database, deriver: ReceiptDeriver, wake_up: WakeUp | None = None
    ) -> None:
        self._database = database
        self._deriver = deriver
        self._wake_up = wake_up
        api = deriver.api
        self._parser = api.client if api is not None else stripe.StripeClient(PARSE_ONLY_KEY)

    def receive(self, text: str) -> ThinOutcome:
        """Store and resolve one verified thin notification (may raise RejectedDelivery)."""
        notification = parse(text, self._parser)
        try:
            return self._receive(notification)
        except DatabaseUnavailable as exc:
            log_fields(log, "stripe thin event not stored", logging.ERROR,
                       event_id=notification.event_id, reason=str(exc))  # fmt: skip
            return ThinOutcome(
                state=ThinState.UNAVAILABLE,
                event_id=notification.event_id,
                event_type=notification.event_type,
                outcome="unavailable",
                detail="database unavailable",
            )

    def _receive(self, notification: Notification) -> ThinOutcome:
        if notification.event_type != INVOICE_PAID:
            ignored = Ignored(reason="event_type_not_handled")
            result = self._record(notification.event_id, notification.header({}), ignored)
            return _recorded(notification, result)
        with self._database.autocommit() as conn:
            stored = conn.execute(
                _Q["record_thin_event"],
                {
                    "event_id": notification.event_id,
                    "event_type": notification.event_type,
                    "account": notification.account,
                    "livemode": notification.livemode,
                    "related_object_id": notification.invoice_id,
                    "notification": Jsonb(notification.body),
                },
            ).fetchone()
            recorded = None
            if stored is not None and stored["status"] == "resolved":
                recorded = conn.execute(
                    _Q["recorded_event"], {"event_id": notification.event_id}
                ).fetchone()
        if recorded is not None:
            return _recorded_before(notification, recorded)
        if self._deriver.api is None:
            return _pending(notification, "STRIPE_API_KEY is not set: the invoice of a "
                            "thin event cannot be fetched", "no_api_key")  # fmt: skip
        try:
            result = self.resolve(notification)
        except ApiError as exc:
            return _pending(notification, f"Stripe API: {exc}", _pending_kind(exc))
        return _recorded(notification, result)

    def resolve(self, notification: Notification) -> IngestResult:
        """Fetch the invoice, derive, ingest and mark the notification resolved.

        Raises ApiError (after noting it on the pending row) when the API
        failed or the look-ups ran past the budget; the notification then
        stays pending for a later try.
        """
        try:
            invoice, decision = self._fetch_and_decide(notification)
        except ApiError as exc:
            self._note_failure(notification.event_id, exc)
            raise
        return self._record(notification.event_id, notification.header(invoice), decision)

    def _fetch_and_decide(self, notification: Notification) -> tuple[dict[str, Any], Decision]:
        api = self._deriver.api
        assert api is not None
        try:
            invoice = api.invoice(notification.invoice_id, notification.scope)
        except NotFound:
            return {}, Ignored(reason="invoice_not_in_account")
        return invoice, self._decide(notification, invoice)

    def _note_failure(self, event_id: str, error: ApiError) -> None:
        with self._database.autocommit() as conn:
            conn.execute(_Q["note_thin_fetch_failed"], {"event_id": event_id,
                                                        "error": str(error)[:500]})  # fmt: skip

    def hold(self, header: EventHeader, event: dict[str, Any]) -> ThinOutcome:
        """Keep a snapshot event whose look-ups ran past the request's budget for the sweep.

        Answered like a pending notification (503: Stripe sends it again), unless
        the event is recorded already (by the sweep, or by a redelivery whose
        look-ups fit the budget): then as that recorded event, a redelivery.
        """
        try:
            return self._hold(header, event)
        except DatabaseUnavailable as exc:
            log_fields(log, "stripe event not held", logging.ERROR,
                       event_id=header.event_id, reason=str(exc))  # fmt: skip
            return _outcome_of(header, ThinState.UNAVAILABLE, "unavailable",
                               detail="database unavailable")  # fmt: skip

    def _hold(self, header: EventHeader, event: dict[str, Any]) -> ThinOutcome:
        late = "Stripe's API took longer than a webhook may wait"
        if "\\u0000" in json.dumps(event):
            # jsonb cannot hold it: not kept here; `receipts backfill` finds the
            # event among the undelivered ones in Stripe's Events API.
            return _outcome_of(header, ThinState.PENDING, "out_of_time", detail=late)
        with self._database.autocommit() as conn:
            held = conn.execute(_Q["hold_event_for_lookups"], {
                "event_id": header.event_id, "event_type": header.event_type,
                "account": header.account, "livemode": header.livemode,
                "related_object_id": str(header.data_object.get("id") or ""),
                "notification": Jsonb(event), "error": late,
            }).fetchone()  # fmt: skip
        if held is not None and held["outcome"] is not None:
            return _outcome_of(header, ThinState.RECORDED, held["outcome"],
                               message_key=held["message_key"], redelivery=True)  # fmt: skip
        return _outcome_of(header, ThinState.PENDING, "out_of_time", detail=late)

    def _decide(self, notification: Notification, invoice: dict[str, Any]) -> Decision:
        if invoice.get("id") != notification.invoice_id:
            return Ignored(reason="invoice_not_in_account")
        if invoice.get("livemode") is not notification.livemode:
            return Ignored(reason="livemode_mismatch")
        # The snapshot type, so derivation treats both formats alike.
        header = replace(notification.header(invoice), event_type="invoice.paid")
        try:
            return self._deriver.derive(header, notification.scope)
        except MalformedEvent:
            return Ignored(reason="invoice_not_usable")

    def _record(self, event_id: str, header: EventHeader, decision: Decision) -> IngestResult:
        with self._database.transaction() as conn:
            result = ingest(conn, header, decision)
            conn.execute(_Q["resolve_thin_event"], {"event_id": event_id})
        if result.outcome == "queued" and self._wake_up is not None:
            self._wake_up.poke()
        return result

    def resolve_pending(self, *, min_age_seconds: float = 60.0, batch: int = 100) -> SweepReport:
        """Resolve every notification and held event still pending; stop at the first API
        failure."""
        report = SweepReport()
        after_time, after_id = datetime(1970, 1, 1, tzinfo=UTC), ""
        while True:
            with self._database.autocommit() as conn:
                rows = conn.execute(
                    _Q["pending_thin_events"],
                    {"min_age_seconds": min_age_seconds, "after_time": after_time,
                     "after_id": after_id, "limit": batch},
                ).fetchall()  # fmt: skip
            for row in rows:
                try:
                    result = self._resolve_stored(row["notification"])
                except RejectedDelivery as rejected:
                    report.outcomes["unreadable"] += 1
                    log_fields(log, "stored thin event unreadable", logging.ERROR,
                               event_id=row["event_id"], reason=rejected.reason)  # fmt: skip
                    continue
                except ApiError as exc:
                    report.stopped = str(exc)
                    return report
                report.outcomes[result.outcome] += 1
            if len(rows) < batch:
                return report
            after_time, after_id = rows[-1]["first_received_at"], rows[-1]["event_id"]

    def _resolve_stored(self, body: dict[str, Any]) -> IngestResult:
        """One stored row: a thin notification, or a snapshot event held past its budget."""
        if body.get("object") == THIN_OBJECT:
            return self.resolve(parse(json.dumps(body), self._parser))
        return self._finish_held(body)

    def _finish_held(self, event: dict[str, Any]) -> IngestResult:
        """Derive a held snapshot event with every look-up (this deriver's own budget, none
        for backfill's), store it and mark it resolved; or only mark it, when a
        redelivery recorded the event meanwhile."""
        try:
            header = parse_event(event)
        except MalformedEvent as exc:
            raise RejectedDelivery(f"not a Stripe event: {exc}") from None
        recorded = self._resolve_if_recorded(header.event_id)
        if recorded is not None:
            return recorded
        try:
            decision = self._deriver.derive(header)
        except ApiError as exc:
            self._note_failure(header.event_id, exc)
            raise
        except Exception as exc:
            # As the webhook treats it (400): values no receipt can be made of. Only
            # the error's type is logged: its message may quote customer data.
            log_fields(log, "held stripe event: no receipt could be derived", logging.ERROR,
                       event_id=header.event_id, error=type(exc).__name__)  # fmt: skip
            decision = Ignored(reason="invoice_not_usable")
        return self._record(header.event_id, header, decision)

    def _resolve_if_recorded(self, event_id: str) -> IngestResult | None:
        """What a recorded event became, its held row marked resolved; None if not recorded."""
        with self._database.autocommit() as conn:
            recorded = conn.execute(_Q["recorded_event"], {"event_id": event_id}).fetchone()
            if recorded is None:
                return None
            conn.execute(_Q["resolve_thin_event"], {"event_id": event_id})
        return IngestResult(
            event_id=event_id,
            outcome=IngestOutcome(recorded["outcome"]),
            message_key=recorded["message_key"],
            redelivery=True,
        )


_Q = queries.load("stripe_api")


def _recorded(notification: Notification, result: IngestResult) -> ThinOutcome:
    return ThinOutcome(
        state=ThinState.RECORDED,
        event_id=notification.event_id,
        event_type=notification.event_type,
        outcome=result.outcome,
        message_key=result.message_key,
        redelivery=result.redelivery,
    )


def _recorded_before(notification: Notification, recorded: dict[str, Any]) -> ThinOutcome:
    return ThinOutcome(
        state=ThinState.RECORDED,
        event_id=notification.event_id,
        event_type=notification.event_type,
        outcome=recorded["outcome"],
        message_key=recorded["message_key"],
        redelivery=True,
    )


def _pending_kind(error: ApiError) -> str:
    """Why a notification waits, in one word: the key refused, out of time, or the API down."""
    if isinstance(error, ApiRefused):
        return "api_refused"
    return "out_of_time" if isinstance(error, OutOfTime) else "api_unavailable"


def _outcome_of(
    header: EventHeader,
    state: ThinState,
    outcome: str,
    *,
    message_key: str | None = None,
    redelivery: bool = False,
    detail: str | None = None,
) -> ThinOutcome:
    """What receiving a snapshot event held for its look-ups did."""
    return ThinOutcome(state=state, event_id=header.event_id, event_type=header.event_type,
                       outcome=outcome, message_key=message_key, redelivery=redelivery,
                       detail=detail)  # fmt: skip


def _pending(notification: Notification, reason: str, outcome: str) -> ThinOutcome:
    return ThinOutcome(
        state=ThinState.PENDING,
        event_id=notification.event_id,
        event_type=notification.event_type,
        outcome=outcome,
        detail=reason,
    )
