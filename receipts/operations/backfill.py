"""``receipts backfill``: ingest the ``invoice.paid`` events Stripe did not deliver.

Stripe keeps events for 30 days and retries a failing endpoint for 3. An
event lost past those retries (the endpoint was down, or misconfigured) is
still in the Events API: this pages through ``GET /v1/events`` for
``invoice.paid`` (by default only events whose delivery has not succeeded,
``delivery_success=false``), for the platform and each Connect account given,
and ingests each one through the webhook's path. An event already recorded is
reported and left alone, so a second run adds nothing. Thin notifications
still pending (Stripe gave up redelivering while the API was unreachable) are
resolved first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from receipts import queries
from receipts.db import Database
from receipts.ingest.deriving import ReceiptDeriver
from receipts.ingest.thin_events import SweepReport, ThinEvents
from receipts.operations.stripe_sync import Progress, ingest_recorded, scopes, wake_workers
from receipts.receipt.event import MalformedEvent, parse_event
from receipts.stripe_api.client import Scope

ALREADY_STORED = "already stored"
MALFORMED = "malformed"


@dataclass(frozen=True, kw_only=True)
class EventOutcome:
    """What one event found in the Events API became."""

    event_id: str
    account: str
    invoice_id: str | None
    outcome: str  # queued, duplicate, conflict, review, ignored, already stored, malformed
    message_key: str | None
    detail: str | None = None


@dataclass
class BackfillReport:
    found: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    thin: SweepReport | None = None


class Backfill:
    """One backfill run over the platform and the given Connect accounts."""

    def __init__(
        self,
        database: Database,
        deriver: ReceiptDeriver,
        *,
        on_event: Callable[[EventOutcome], None] = lambda outcome: None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        assert deriver.api is not None
        self._database = database
        self._deriver = deriver
        self._api = deriver.api
        self._on_event = on_event
        self._progress = Progress(progress)
        self.report = BackfillReport()

    def run(self, *, since: int, accounts: list[str], include_delivered: bool) -> BackfillReport:
        """Raises ApiError when the API fails; what was done until then stays done."""
        self.report.thin = ThinEvents(self._database, self._deriver).resolve_pending()
        for scope in scopes(accounts):
            self._scope(scope, since=since, undelivered_only=not include_delivered)
        if self.report.outcomes["queued"] or self.report.thin.outcomes["queued"]:
            with self._database.autocommit() as conn:
                wake_workers(conn)
        return self.report

    def _scope(self, scope: Scope, *, since: int, undelivered_only: bool) -> None:
        after: str | None = None
        while True:
            page = self._api.invoice_paid_events(
                scope, since=since, undelivered_only=undelivered_only, starting_after=after
            )
            with self._database.autocommit() as conn:
                known = {
                    row["event_id"]: row
                    for row in conn.execute(
                        _Q["recorded_events"], {"event_ids": [e.get("id") for e in page.items]}
                    )
                }
            for event in page.items:
                self._record(self._one(event, scope, known))
            self._progress.tick(lambda: f"… {self.report.found} events checked")
            if not page.has_more or not page.items:
                return
            after = str(page.items[-1]["id"])

    def _one(self, event: dict[str, Any], scope: Scope, known: dict[str, Any]) -> EventOutcome:
        if scope.account != "platform":
            # Events listed for a connected account are that account's, as a
            # Connect webhook would say in `account`: the message key follows it.
            event = {**event, "account": scope.account}
        data = event.get("data")
        invoice = data.get("object") if isinstance(data, dict) else None
        invoice_id = invoice.get("id") if isinstance(invoice, dict) else None
        event_id = str(event.get("id"))
        stored = known.get(event_id)
        if stored is not None:
            return EventOutcome(event_id=event_id, account=scope.account, invoice_id=invoice_id,
                                outcome=ALREADY_STORED, message_key=stored["message_key"],
                                detail=stored["outcome"])  # fmt: skip
        try:
            header = parse_event(event)
            decision = self._deriver.derive(header, scope)
        except MalformedEvent as exc:
            return EventOutcome(event_id=event_id, account=scope.account, invoice_id=invoice_id,
                                outcome=MALFORMED, message_key=None, detail=str(exc))  # fmt: skip
        with self._database.transaction() as conn:
            result = ingest_recorded(conn, header, decision, source="backfill")
        return EventOutcome(
            event_id=event_id,
            account=scope.account,
            invoice_id=invoice_id,
            outcome=result.outcome,
            message_key=result.message_key,
            detail=result.detail,
        )

    def _record(self, outcome: EventOutcome) -> None:
        self.report.found += 1
        self.report.outcomes[outcome.outcome] += 1
        self._on_event(outcome)


_Q = queries.load("stripe_api")
