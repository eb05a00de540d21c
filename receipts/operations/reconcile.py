"""``receipts reconcile``: prove against Stripe's own list that no paid invoice was missed.

Pages through ``GET /v1/invoices?status=paid`` (created in the window) for the
platform and each Connect account given, and lists every paid invoice that
should have a receipt (not zero-value, unless those are sent) but has no
outbox row, whatever its status. With ``apply`` each is ingested through the
webhook's derivation under the same message key, recorded as an event
``reconcile:<invoice id>`` with source ``reconcile``. Every run leaves one
``reconcile_runs`` row, which ``receipts status`` and ``/metrics`` report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from receipts import queries
from receipts.db import Database
from receipts.ingest.deriving import ReceiptDeriver
from receipts.ingest.store import IngestResult
from receipts.message_keys import InvalidMessageKey, message_key
from receipts.operations.stripe_sync import Progress, ingest_recorded, scopes, wake_workers
from receipts.receipt.derivation import is_zero_value
from receipts.receipt.event import EventHeader, MalformedEvent
from receipts.stripe_api.client import ApiError, Scope

RECONCILE_EVENT_PREFIX = "reconcile:"


@dataclass(frozen=True, kw_only=True)
class MissingInvoice:
    """A paid invoice with no receipt row."""

    scope: Scope
    invoice: dict[str, Any]
    key: str

    @property
    def invoice_id(self) -> str:
        return str(self.invoice["id"])

    @property
    def paid_at(self) -> int | None:
        transitions = self.invoice.get("status_transitions")
        paid_at = transitions.get("paid_at") if isinstance(transitions, dict) else None
        return paid_at if isinstance(paid_at, int) else None


@dataclass
class ReconcileReport:
    paid_invoices: int = 0
    missing: list[MissingInvoice] = field(default_factory=list)
    applied: list[tuple[MissingInvoice, IngestResult]] = field(default_factory=list)
    not_applied: list[tuple[MissingInvoice, str]] = field(default_factory=list)
    error: str | None = None

    @property
    def result(self) -> str:
        if self.error is not None or self.not_applied:
            return "failed"
        if not self.missing:
            return "clean"
        return "applied" if len(self.applied) == len(self.missing) else "missing"


class Reconcile:
    """One reconcile run."""

    def __init__(
        self,
        database: Database,
        deriver: ReceiptDeriver,
        *,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        assert deriver.api is not None
        self._database = database
        self._deriver = deriver
        self._api = deriver.api
        self._progress = Progress(progress)
        self.report = ReconcileReport()

    def run(self, *, since: int, accounts: list[str], apply: bool) -> ReconcileReport:
        """Find (and with ``apply`` ingest) the missing; record the run even when it fails."""
        started = datetime.now(UTC)
        try:
            for scope in scopes(accounts):
                self._find(scope, since=since)
            if apply:
                self._apply()
        except ApiError as exc:
            self.report.error = str(exc)
            raise
        finally:
            self._record_run(started, since, accounts, apply)
        return self.report

    def _find(self, scope: Scope, *, since: int) -> None:
        after: str | None = None
        while True:
            page = self._api.paid_invoices(scope, since=since, starting_after=after)
            expected = [
                MissingInvoice(scope=scope, invoice=invoice, key=self._key(scope, invoice))
                for invoice in page.items
                if self._expects_receipt(invoice)
            ]
            self.report.paid_invoices += len(page.items)
            with self._database.autocommit() as conn:
                present = {
                    row["message_key"]
                    for row in conn.execute(
                        _Q["existing_receipts"], {"keys": [found.key for found in expected]}
                    )
                }
            self.report.missing += [found for found in expected if found.key not in present]
            self._progress.tick(lambda: f"… {self.report.paid_invoices} paid invoices checked")
            if not page.has_more or not page.items:
                return
            after = str(page.items[-1]["id"])

    def _expects_receipt(self, invoice: dict[str, Any]) -> bool:
        if not isinstance(invoice.get("id"), str):
            return False
        return self._deriver.settings.send_zero_value or not is_zero_value(invoice)

    def _key(self, scope: Scope, invoice: dict[str, Any]) -> str:
        try:
            return message_key(scope.account, invoice.get("livemode") is True, invoice["id"])
        except InvalidMessageKey:
            return ""

    def _apply(self) -> None:
        for missing in self.report.missing:
            header = EventHeader(
                event_id=RECONCILE_EVENT_PREFIX + missing.invoice_id,
                event_type="invoice.paid",
                account=missing.scope.account,
                livemode=missing.invoice.get("livemode") is True,
                created=None,
                data_object=missing.invoice,
            )
            try:
                decision = self._deriver.derive(header, missing.scope)
            except MalformedEvent as exc:
                self.report.not_applied.append((missing, str(exc)))
                continue
            with self._database.transaction() as conn:
                result = ingest_recorded(conn, header, decision, source="reconcile")
                if result.outcome == "queued":
                    wake_workers(conn)
            self.report.applied.append((missing, result))

    def _record_run(self, started: datetime, since: int, accounts: list[str], apply: bool) -> None:
        report = self.report
        with self._database.autocommit() as conn:
            conn.execute(
                _Q["record_reconcile_run"],
                {
                    "started_at": started,
                    "window_start": datetime.fromtimestamp(since, tz=UTC),
                    "accounts": [scope.account for scope in scopes(accounts)],
                    "apply": apply,
                    "paid_invoices": report.paid_invoices,
                    "missing": len(report.missing),
                    "applied": len(report.applied),
                    "result": report.result,
                    "error": report.error
                    or "; ".join(f"{m.invoice_id}: {why}" for m, why in report.not_applied)
                    or None,
                },
            )


_Q = queries.load("stripe_api")
