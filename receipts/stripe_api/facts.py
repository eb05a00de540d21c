"""What only Stripe's API knows about a paid invoice, looked up for its receipt.

Look-ups, each on its own: the payment method ("Visa ending 4242"), the
customer's preferred languages, every line when the payload's list was cut
short (``lines.has_more``), the customer's current email when the invoice
has none, the merchant's tax ids that the payload names only by id
(``account_tax_ids``: ``GET /v1/tax_ids/{id}``), the names of products whose
lines have no description (``GET /v1/products/{id}``, once per product), and,
on API versions since 2025-03-31.basil, what was paid outside Stripe (the
invoice's payments whose payment record was processed elsewhere). Every call
names the same account as the invoice's (``Stripe-Account`` or
``Stripe-Context``). A look-up that fails leaves its part out: the receipt is
made as it would be without it, ingest goes on, and
``receipts_stripe_api_lookups_total{lookup, outcome}`` counts it. A look-up
(or a page of lines) that would start after the deadline is not made, and
:func:`enrich` raises :class:`OutOfTime`: a receipt is never made from part
of what the budget cut short (the webhook answers 503 and keeps the event
for a later run without the budget).

The payment method (and the charge's receipt number) is found as the
invoice's API version allows: ``charge`` on invoices rendered before
2025-03-31, else the invoice's paid payments (a PaymentIntent's latest charge,
a bare charge, or a payment record).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn, TypeVar

from prometheus_client import Counter

from receipts.logs import log_fields
from receipts.receipt.api_facts import MAX_PRODUCTS, MAX_TAX_IDS, ApiFacts, Payment, TaxId
from receipts.receipt.invoice_details import is_paid_off_stripe
from receipts.receipt.invoice_lines import products_to_name
from receipts.receipt.payment_methods import method_of, receipt_number_of
from receipts.receipt.untrusted import one_line
from receipts.stripe_api.client import (
    ApiError,
    Deadline,
    Json,
    NotFound,
    OutOfTime,
    Scope,
    StripeApi,
)

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


def enrich(api: StripeApi, invoice: Json, scope: Scope, *, deadline: Deadline | None
           ) -> Enriched:  # fmt: skip
    """Look everything up; never raises for a failed look-up, raises OutOfTime past
    ``deadline``."""
    lookups = _Lookups(invoice_id=str(invoice.get("id")), deadline=deadline)
    invoice = dict(invoice)
    lines = invoice.get("lines")
    every_line = None
    if isinstance(lines, dict) and lines.get("has_more") is True:
        every_line = lookups.run(
            "lines", lambda: api.invoice_lines(str(invoice["id"]), scope, deadline=deadline)
        )
    customer = _customer(api, invoice, scope, lookups)
    if customer is not None and not _text(invoice.get("customer_email")):
        email = customer.get("email")
        if _text(email):
            invoice["customer_email"] = email
    payments = InvoicePayments(api, invoice, scope)
    paid = lookups.run("payment_method", lambda: payment(api, invoice, scope, payments))
    off_stripe = None
    if _may_be_paid_off_stripe(invoice):
        off_stripe = lookups.run("payments", lambda: paid_off_stripe(payments))
    locales = customer.get("preferred_locales") if customer is not None else None
    listed = invoice if every_line is None else {"lines": {"data": every_line}}
    return Enriched(
        invoice=invoice,
        facts=ApiFacts(
            payment_method=(paid or Payment()).method,
            receipt_number=(paid or Payment()).receipt_number,
            preferred_locales=tuple(
                locale for locale in locales or () if isinstance(locale, str) and locale
            ),
            all_lines=tuple(every_line) if every_line is not None else None,
            merchant_tax_ids=_merchant_tax_ids(api, invoice, scope, lookups),
            product_names=_product_names(api, listed, scope, lookups),
            paid_off_stripe=off_stripe,
        ),
    )


def _merchant_tax_ids(api: StripeApi, invoice: Json, scope: Scope, lookups: _Lookups
                      ) -> tuple[TaxId, ...]:  # fmt: skip
    """The account's tax ids the payload names only as ``txi_…``, with their values."""
    named = invoice.get("account_tax_ids")
    ids = [found for found in named if isinstance(found, str) and found.startswith("txi_")] if (
        isinstance(named, list)
    ) else []  # fmt: skip
    found: list[TaxId] = []
    for tax_id in list(dict.fromkeys(ids))[:MAX_TAX_IDS]:
        entry = lookups.run("tax_id", functools.partial(api.tax_id, tax_id, scope))
        if entry is None or entry.get("deleted"):
            continue
        value, kind = one_line(entry.get("value"), 60), entry.get("type")
        if value:
            found.append(TaxId(kind=kind if isinstance(kind, str) else None, value=value))
    return tuple(found)


def _product_names(api: StripeApi, invoice: Json, scope: Scope, lookups: _Lookups
                   ) -> tuple[tuple[str, str], ...]:  # fmt: skip
    """The names of the products of lines without a description, one look-up per product."""
    names: list[tuple[str, str]] = []
    for product_id in products_to_name(invoice)[:MAX_PRODUCTS]:
        product = lookups.run("product", functools.partial(api.product, product_id, scope))
        if product is None or product.get("deleted"):
            continue
        name = one_line(product.get("name"), 300)
        if name:
            names.append((product_id, name))
    return tuple(names)


class InvoicePayments:
    """An invoice's paid payments, from the payload when it lists them, else listed once."""

    def __init__(self, api: StripeApi, invoice: Json, scope: Scope) -> None:
        self._api, self._invoice, self._scope = api, invoice, scope
        self._listed: list[Json] | None = None
        self._records: dict[str, Json] = {}

    def __call__(self) -> list[Json]:
        if self._listed is None:
            payments = self._invoice.get("payments")
            listed = payments.get("data") if isinstance(payments, dict) else None
            if not isinstance(listed, list):
                listed = self._api.invoice_payments(str(self._invoice["id"]), self._scope)
            self._listed = [entry for entry in listed if isinstance(entry, dict)]
        return self._listed

    def record(self, value: object) -> Json:
        """A payment record as given when expanded, else fetched (once)."""
        if isinstance(value, str) and value not in self._records:
            self._records[value] = self._api.payment_record(value, self._scope)
        if isinstance(value, str):
            return self._records[value]
        return value if isinstance(value, dict) else {}


def _may_be_paid_off_stripe(invoice: Json) -> bool:
    """API versions since basil: no ``paid_out_of_band`` flag, ``amount_paid`` counts it all.

    Earlier versions carry the flag (and ``charge``, ``paid``, ``payment_intent``).
    """
    earlier = ("paid_out_of_band", "charge", "paid", "payment_intent")
    amount_paid = invoice.get("amount_paid")
    if any(field in invoice for field in earlier):
        return False
    return isinstance(amount_paid, int) and amount_paid > 0


def paid_off_stripe(payments: InvoicePayments) -> int | None:
    """What the invoice's paid payments recorded outside Stripe add up to; None if nothing."""
    total = 0
    for entry in payments():
        found = entry.get("payment")
        if entry.get("status") != "paid" or not isinstance(found, dict):
            continue
        if found.get("type") != "payment_record" or not found.get("payment_record"):
            continue
        record = payments.record(found["payment_record"])
        amount = entry.get("amount_paid")
        if is_paid_off_stripe({**found, "payment_record": record}) and isinstance(amount, int):
            total += amount
    return total or None


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


def payment(
    api: StripeApi, invoice: Json, scope: Scope, payments: InvoicePayments | None = None
) -> Payment | None:
    """How the invoice was paid, or None when no payment says so."""
    charge = invoice.get("charge")  # API versions before 2025-03-31
    if charge:
        return _of_charge(_expanded(charge, lambda cid: api.charge(cid, scope)))
    payments = payments or InvoicePayments(api, invoice, scope)
    for invoice_payment in payments():
        if invoice_payment.get("status") == "paid":
            found = _method_of_payment(api, invoice_payment.get("payment"), scope, payments)
            if found is not None:
                return found
    return None


def _method_of_payment(
    api: StripeApi, payment: object, scope: Scope, payments: InvoicePayments
) -> Payment | None:
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
        record = payments.record(payment["payment_record"])
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
    deadline: Deadline | None

    def run(self, lookup: str, call: Callable[[], T | None]) -> T | None:
        """The look-up's answer, None when it found nothing or failed; OutOfTime past
        the deadline."""
        if self.deadline is not None and self.deadline.passed():
            self._out_of_time(lookup, "stripe api look-up not made: time budget spent")
        try:
            found = call()
        except NotFound:
            LOOKUPS.labels(lookup=lookup, outcome="none").inc()
            return None
        except OutOfTime:
            self._out_of_time(lookup, "stripe api look-up cut short: time budget spent")
        except (ApiError, KeyError, TypeError, ValueError) as exc:
            LOOKUPS.labels(lookup=lookup, outcome="failed").inc()
            log_fields(log, "stripe api look-up failed; the receipt goes without it",
                       logging.WARNING, lookup=lookup, invoice_id=self.invoice_id,
                       error=_short(exc))  # fmt: skip
            return None
        LOOKUPS.labels(lookup=lookup, outcome="ok" if found is not None else "none").inc()
        return found

    def _out_of_time(self, lookup: str, message: str) -> NoReturn:
        LOOKUPS.labels(lookup=lookup, outcome="skipped").inc()
        log_fields(log, message, lookup=lookup, invoice_id=self.invoice_id)
        raise OutOfTime(f"the look-up budget ran out at {lookup}")


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__
