"""What only Stripe's API knows about a paid invoice, looked up for its receipt.

Four look-ups, each on its own: the payment method ("Visa ending 4242"), the
customer's preferred languages, every line when the payload's list was cut
short (``lines.has_more``), and the customer's current email when the invoice
has none. A look-up that fails, or that would start after the deadline, leaves
its part out: the receipt is made as it would be without it, ingest goes on,
and ``receipts_stripe_api_lookups_total{lookup, outcome}`` counts it.

The payment method (and the charge's receipt number) is found as the
invoice's API version allows: ``charge`` on invoices rendered before
2025-03-31, else the invoice's paid payments (a PaymentIntent's latest charge,
a bare charge, or a payment record).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client import Counter

from receipts.logs import log_fields
from receipts.receipt.api_facts import ApiFacts, Payment
from receipts.receipt.payment_methods import method_of, receipt_number_of
from receipts.stripe_api.client import ApiError, Json, NotFound, Scope, StripeApi

log = logging.getLogger(__name__)

LOOKUPS = Counter(
    "receipts_stripe_api_lookups",
    "Look-ups of receipt facts in Stripe's API, by look-up and outcome "
    "(ok, none: nothing to find, failed, skipped: past the time budget).",
    ["lookup", "outcome"],
)

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Enriched:
    """The invoice as derivation should see it, and the facts for the template."""

    invoice: Json  # with the customer's email if the payload had none
    facts: ApiFacts


def enrich(api: StripeApi, invoice: Json, scope: Scope, *, deadline: float | None) -> Enriched:
    """Look everything up; never raises for a failed look-up."""
    lookups = _Lookups(invoice_id=str(invoice.get("id")), deadline=deadline)
    invoice = dict(invoice)
    lines = invoice.get("lines")
    every_line = None
    if isinstance(lines, dict) and lines.get("has_more") is True:
        every_line = lookups.run("lines", lambda: api.invoice_lines(str(invoice["id"]), scope))
    customer = _customer(api, invoice, scope, lookups)
    if customer is not None and not _text(invoice.get("customer_email")):
        email = customer.get("email")
        if _text(email):
            invoice["customer_email"] = email
    paid = lookups.run("payment_method", lambda: payment(api, invoice, scope)) or Payment()
    locales = customer.get("preferred_locales") if customer is not None else None
    return Enriched(
        invoice=invoice,
        facts=ApiFacts(
            payment_method=paid.method,
            receipt_number=paid.receipt_number,
            preferred_locales=tuple(
                locale for locale in locales or () if isinstance(locale, str) and locale
            ),
            all_lines=tuple(every_line) if every_line is not None else None,
        ),
    )


def _customer(api: StripeApi, invoice: Json, scope: Scope, lookups: _Lookups) -> Json | None:
    customer = invoice.get("customer")
    if isinstance(customer, dict) and "email" in customer:
        return customer  # expanded in the payload already
    customer_id = customer.get("id") if isinstance(customer, dict) else customer
    if not isinstance(customer_id, str) or not customer_id.startswith("cus_"):
        LOOKUPS.labels(lookup="customer", outcome="none").inc()
        return None
    found = lookups.run("customer", lambda: api.customer(customer_id, scope))
    if found is None or found.get("deleted") is True:
        return None
    return found


def payment(api: StripeApi, invoice: Json, scope: Scope) -> Payment | None:
    """How the invoice was paid, or None when no payment says so."""
    charge = invoice.get("charge")  # API versions before 2025-03-31
    if charge:
        return _of_charge(_expanded(charge, lambda cid: api.charge(cid, scope)))
    payments = invoice.get("payments")
    listed = payments.get("data") if isinstance(payments, dict) else None
    if not isinstance(listed, list):
        listed = api.invoice_payments(str(invoice["id"]), scope)
    for invoice_payment in listed:
        if isinstance(invoice_payment, dict) and invoice_payment.get("status") == "paid":
            found = _method_of_payment(api, invoice_payment.get("payment"), scope)
            if found is not None:
                return found
    return None


def _method_of_payment(api: StripeApi, payment: object, scope: Scope) -> Payment | None:
    if not isinstance(payment, dict):
        return None
    kind = payment.get("type")
    if kind == "payment_intent" and payment.get("payment_intent"):
        intent = _expanded(payment["payment_intent"], lambda pid: api.payment_intent(pid, scope))
        latest = intent.get("latest_charge")
        if isinstance(latest, str):
            latest = api.charge(latest, scope)
        return _of_charge(latest) if isinstance(latest, dict) else None
    if kind == "charge" and payment.get("charge"):
        return _of_charge(_expanded(payment["charge"], lambda cid: api.charge(cid, scope)))
    if kind == "payment_record" and payment.get("payment_record"):
        record = _expanded(payment["payment_record"], lambda rid: api.payment_record(rid, scope))
        method = method_of(record)
        return None if method is None else Payment(method=method)
    return None


def _of_charge(charge: Json) -> Payment | None:
    method = method_of(charge)
    return (
        None if method is None else Payment(method=method, receipt_number=receipt_number_of(charge))
    )


def _expanded(value: object, retrieve: Callable[[str], Json]) -> Json:
    """An expandable field as an object: as given when expanded, else fetched by id."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        return retrieve(value)
    return {}


def _text(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


@dataclass
class _Lookups:
    """Runs look-ups for one invoice: time budget, counting, logging."""

    invoice_id: str
    deadline: float | None

    def run(self, lookup: str, call: Callable[[], T | None]) -> T | None:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            LOOKUPS.labels(lookup=lookup, outcome="skipped").inc()
            log_fields(log, "stripe api look-up skipped: time budget spent", lookup=lookup,
                       invoice_id=self.invoice_id)  # fmt: skip
            return None
        try:
            found = call()
        except NotFound:
            LOOKUPS.labels(lookup=lookup, outcome="none").inc()
            return None
        except (ApiError, KeyError, TypeError, ValueError) as exc:
            LOOKUPS.labels(lookup=lookup, outcome="failed").inc()
            log_fields(log, "stripe api look-up failed; the receipt goes without it",
                       logging.WARNING, lookup=lookup, invoice_id=self.invoice_id,
                       error=_short(exc))  # fmt: skip
            return None
        LOOKUPS.labels(lookup=lookup, outcome="ok" if found is not None else "none").inc()
        return found


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__
