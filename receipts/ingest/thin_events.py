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
   notification resolved; Stripe gets 200.

When the API cannot be reached, refuses our key, or no key is configured,
the notification stays ``pending`` and Stripe gets 503, so it redelivers
(for up to three days); each redelivery tries again. ``receipts backfill``
resolves whatever is still pending after that. An invoice the API does not
know in the notification's account, or one that is not paid, is recorded as
ignored with its reason.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import stripe
from psycopg.types.json import Jsonb

from receipts import queries
from receipts.db import Database, DatabaseUnavailable
from receipts.ingest.deriving import ReceiptDeriver
from receipts.ingest.events import MalformedEvent, RejectedDelivery
from receipts.ingest.receipt import Decision, Ignored
from receipts.ingest.store import IngestResult, ingest
from receipts.ingest.thin_notifications import (
    INVOICE_PAID,
    PARSE_ONLY_KEY,
    Notification,
    looks_thin,
    parse,
)
from receipts.ingest.wakeup import WakeUp
from receipts.logs import log_fields
from receipts.stripe_api.client import ApiError, ApiRefused, NotFound

log = logging.getLogger("receipts.web.thin_events")

__all__ = ["ThinAnswer", "ThinEvents", "looks_thin"]


@dataclass(frozen=True, kw_only=True)
class ThinAnswer:
    """What the webhook answers Stripe, and the type and outcome for the metrics."""

    status: int
    body: dict[str, Any]
    event_type: str
    outcome: str


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

    def receive(self, text: str) -> ThinAnswer:
        """Answer one verified thin notification (may raise RejectedDelivery)."""
        started = time.perf_counter()
        notification = parse(text, self._parser)
        try:
            answer = self._receive(notification)
        except DatabaseUnavailable as exc:
            log_fields(log, "stripe thin event not stored", logging.ERROR,
                       event_id=notification.event_id, reason=str(exc))  # fmt: skip
            answer = ThinAnswer(
                status=503,
                body={"error": "database unavailable, retry later"},
                event_type=notification.event_type,
                outcome="unavailable",
            )
        log_fields(log, "stripe thin event", _level(answer), event_id=notification.event_id,
                   type=notification.event_type, status=answer.status, outcome=answer.outcome,
                   key=answer.body.get("message_key"), detail=answer.body.get("error"),
                   ms=round((time.perf_counter() - started) * 1000, 1))  # fmt: skip
        return answer

    def _receive(self, notification: Notification) -> ThinAnswer:
        if notification.event_type != INVOICE_PAID:
            result = self._record(notification, {}, Ignored(reason="event_type_not_handled"))
            return _answer(notification, result)
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
            return _stored_answer(notification, recorded)
        if self._deriver.api is None:
            return _pending_answer(notification, "STRIPE_API_KEY is not set: the invoice of a "
                                   "thin event cannot be fetched", "no_api_key")  # fmt: skip
        try:
            result = self.resolve(notification)
        except ApiError as exc:
            kind = "api_refused" if isinstance(exc, ApiRefused) else "api_unavailable"
            return _pending_answer(notification, f"Stripe API: {exc}", kind)
        return _answer(notification, result)

    def resolve(self, notification: Notification) -> IngestResult:
        """Fetch the invoice, derive, ingest and mark the notification resolved.

        Raises ApiError (after noting it on the pending row) when the API
        failed; the notification then stays pending for a later try.
        """
        api = self._deriver.api
        assert api is not None
        decision: Decision
        try:
            invoice = api.invoice(notification.invoice_id, notification.scope)
        except NotFound:
            invoice, decision = {}, Ignored(reason="invoice_not_in_account")
        except ApiError as exc:
            with self._database.autocommit() as conn:
                conn.execute(
                    _Q["note_thin_fetch_failed"],
                    {"event_id": notification.event_id, "error": str(exc)[:500]},
                )
            raise
        else:
            decision = self._decide(notification, invoice)
        return self._record(notification, invoice, decision)

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

    def _record(
        self, notification: Notification, invoice: dict[str, Any], decision: Decision
    ) -> IngestResult:
        with self._database.transaction() as conn:
            result = ingest(conn, notification.header(invoice), decision)
            conn.execute(_Q["resolve_thin_event"], {"event_id": notification.event_id})
        if result.outcome == "queued" and self._wake_up is not None:
            self._wake_up.poke()
        return result

    def resolve_pending(self, *, min_age_seconds: float = 60.0, batch: int = 100) -> SweepReport:
        """Resolve every notification still pending; stop at the first API failure."""
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
                    notification = parse(json.dumps(row["notification"]), self._parser)
                    result = self.resolve(notification)
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


_Q = queries.load("stripe_api")


def _answer(notification: Notification, result: IngestResult) -> ThinAnswer:
    return ThinAnswer(
        status=200,
        body={"received": True, "outcome": result.outcome, "message_key": result.message_key},
        event_type=notification.event_type,
        outcome="redelivery" if result.redelivery else result.outcome,
    )


def _stored_answer(notification: Notification, recorded: dict[str, Any]) -> ThinAnswer:
    return ThinAnswer(
        status=200,
        body={
            "received": True,
            "outcome": recorded["outcome"],
            "message_key": recorded["message_key"],
        },
        event_type=notification.event_type,
        outcome="redelivery",
    )


def _pending_answer(notification: Notification, reason: str, outcome: str) -> ThinAnswer:
    return ThinAnswer(
        status=503,
        body={"error": f"{reason}; the notification is stored, retry later"},
        event_type=notification.event_type,
        outcome=outcome,
    )


def _level(answer: ThinAnswer) -> int:
    if answer.status >= 500:
        return logging.ERROR
    return logging.WARNING if answer.outcome in ("conflict", "review") else logging.INFO
