"""Sample receipts the renderer tries every template on at start-up.

One has every optional part a receipt can show (credits, quantities, periods,
discounts, each kind of tax, shipping, credit balance, a truncated line list,
custom fields, notes, tax ids, a receipt number), one none of them, and one is
settled without a charge (marked as paid, with a balance carried and credit
added): between them they take a template through each branch that depends
on the data, so a template that cannot render one fails the start, not a
webhook. Each adds up, as every receipt must. Likewise two refunds and two
credit notes, as the render input ingest stores for them, go through the
refund and credit-note templates: every optional part, and none.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from receipts.receipt.api_facts import Payment, PaymentMethod, TaxId
from receipts.receipt.invoice_details import InvoiceDetails
from receipts.receipt.invoice_facts import LineItem, ReceiptFacts
from receipts.receipt.invoice_totals import Discount, Tax

SAMPLE_PAYMENT_METHOD = PaymentMethod(kind="card", brand="visa", last4="4242")

_URL = "https://invoice.stripe.com/i/acct_1Sample/test_Sample"
_PAID_AT = 1764460800


def sample_receipts() -> tuple[ReceiptFacts, ...]:
    return _full(), _minimal(), _settled_elsewhere()


def _full() -> ReceiptFacts:
    return ReceiptFacts(
        invoice_id="in_1Sample",
        number="SAMPLE-0001",
        to="jenny.rosen@example.com",
        customer_name="Jenny Rosen",
        customer_address=("1 Main Street", "Brooklyn, NY 11201"),
        customer_country="US",
        merchant="Sample Shop",
        currency="usd",
        lines=(
            LineItem(
                description="Unused time on Starter",
                quantity=None,
                amount=-967,
                proration=True,
                period=(_PAID_AT - 86400 * 15, _PAID_AT),
            ),
            LineItem(
                description="Pro",
                quantity=Decimal(2),
                amount=9800,
                proration=False,
                period=(_PAID_AT, _PAID_AT + 86400 * 30),
            ),
            LineItem(description=None, quantity=None, amount=500, proration=False, period=None),
        ),
        more_lines=3,
        lines_truncated=True,
        subtotal=9333,
        discounts=(
            Discount(name="Launch", percent_off=Decimal(20), amount=1867),
            Discount(name=None, percent_off=None, amount=100),
            Discount(name=None, percent_off=None, amount=50, credit=True),
        ),
        taxes=(
            Tax(
                name="Sales tax",
                percentage=Decimal("8.875"),
                inclusive=False,
                reverse_charge=False,
                amount=658,
            ),
            Tax(
                name="VAT", percentage=Decimal(19), inclusive=True, reverse_charge=False, amount=10
            ),
            Tax(name=None, percentage=None, inclusive=True, reverse_charge=False, amount=5),
            Tax(name=None, percentage=None, inclusive=False, reverse_charge=True, amount=0),
        ),
        shipping=500,
        total=8474,
        credit_notes=100,
        credit_applied=400,
        previous_balance=300,
        amount_paid=8274,
        paid_at=_PAID_AT,
        hosted_invoice_url=_URL,
        invoice_pdf=_URL + "/pdf",
        receipt_number="1466-5230",
        details=InvoiceDetails(
            custom_fields=(("PO number", "4500012345"),),
            memo="Thank you for your business.",
            footer="Sample Shop Ltd, 1 Main Street, Brooklyn",
            customer_tax_ids=(TaxId(kind="eu_vat", value="DE123456789"),),
            merchant_tax_ids=(TaxId(kind="us_ein", value="12-3456789"),),
            paid_out_of_band=False,
        ),
    )


def _minimal() -> ReceiptFacts:
    return ReceiptFacts(
        invoice_id="in_1Sample",
        number="in_1Sample",
        to="jenny.rosen@example.com",
        customer_name=None,
        customer_address=(),
        customer_country=None,
        merchant=None,
        currency="jpy",
        lines=(),
        more_lines=None,
        lines_truncated=True,
        subtotal=None,
        discounts=(),
        taxes=(),
        shipping=None,
        total=None,
        credit_notes=0,
        credit_applied=0,
        previous_balance=0,
        amount_paid=1500,
        paid_at=None,
        hosted_invoice_url=_URL,
        invoice_pdf=None,
    )


def _settled_elsewhere() -> ReceiptFacts:
    """No merchant, no charge: credit added, a balance carried, the rest marked as paid."""
    return ReceiptFacts(
        invoice_id="in_1Sample",
        number="in_1Sample",
        to="jenny.rosen@example.com",
        customer_name=None,
        customer_address=(),
        customer_country=None,
        merchant=None,
        currency="kwd",
        lines=(
            LineItem(description="Seat", quantity=None, amount=12340, proration=False, period=None),
        ),
        more_lines=None,
        lines_truncated=False,
        lines_listed=True,
        subtotal=12340,
        discounts=(),
        taxes=(),
        shipping=None,
        total=12340,
        credit_notes=0,
        credit_applied=0,
        previous_balance=0,
        credit_added=100,
        carried_forward=40,
        amount_paid=0,
        paid_at=_PAID_AT,
        hosted_invoice_url=_URL,
        invoice_pdf=None,
        payment=Payment(),
        details=InvoiceDetails(
            custom_fields=(),
            memo=None,
            footer=None,
            customer_tax_ids=(),
            merchant_tax_ids=(),
            merchant_tax_ids_unknown=1,
            paid_out_of_band=True,
        ),
    )


def _sample_invoice(**changes: Any) -> dict[str, Any]:
    """The paid invoice a sample refund or credit note belongs to, as the API returns it."""
    invoice: dict[str, Any] = {
        "id": "in_1Sample",
        "object": "invoice",
        "number": "SAMPLE-0001",
        "customer_email": "jenny.rosen@example.com",
        "customer_name": "Jenny Rosen",
        "account_name": "Sample Shop",
        "currency": "usd",
        "amount_paid": 9800,
        "status": "paid",
        "status_transitions": {"paid_at": _PAID_AT},
        "hosted_invoice_url": _URL,
    }
    invoice.update(changes)
    return invoice


def _render_input(kind: str, document: dict[str, Any], **invoice: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        kind: document,
        "invoice": _sample_invoice(**invoice),
        "created": _PAID_AT + 86400 * 3,
        "from": "Sample Shop <billing@example.com>",
        "reply_to": None,
        "api_facts": None,
    }


def sample_refund_inputs() -> tuple[dict[str, Any], ...]:
    """A partial refund to a card with a reason; a full one with nothing optional."""
    partial = _render_input(
        "refund",
        {
            "id": "re_1SamplePartial",
            "object": "refund",
            "amount": 4900,
            "currency": "usd",
            "created": _PAID_AT + 86400 * 3,
            "status": "succeeded",
            "reason": "requested_by_customer",
            "destination_details": {"type": "card", "card": {"brand": "visa", "last4": "4242"}},
        },
    )
    full = _render_input(
        "refund",
        {"id": "re_1SampleFull", "object": "refund", "amount": 1500, "currency": "jpy"},
        number=None,
        customer_name=None,
        account_name=None,
        currency="jpy",
        amount_paid=1500,
        status_transitions=None,
        hosted_invoice_url=None,
    )
    return partial, full


def sample_credit_note_inputs() -> tuple[dict[str, Any], ...]:
    """One with every part (discount, tax, shipping, three ways settled); one with none."""
    full = _render_input(
        "credit_note",
        {
            "id": "cn_1SampleFull",
            "object": "credit_note",
            "number": "SAMPLE-0001-CN-01",
            "currency": "usd",
            "created": _PAID_AT + 86400 * 3,
            "lines": {
                "data": [
                    {"description": "Pro", "quantity": 2, "amount": 9800, "discount_amount": 0},
                    {"description": None, "quantity": 1, "amount": 500, "discount_amount": 0},
                ],
                "has_more": False,
            },
            "subtotal": 10300,
            "discount_amount": 1000,
            "tax_amounts": [{"amount": 930, "inclusive": False, "tax_rate": "txr_1Sample"}],
            "shipping_cost": {"amount_subtotal": 500},
            "total": 10730,
            "amount": 10730,
            "refunds": [{"refund": "re_1Sample", "amount_refunded": 5000}],
            "customer_balance_transaction": {"id": "cbtxn_1Sample", "amount": -3000},
            "out_of_band_amount": 2730,
            "reason": "product_unsatisfactory",
            "memo": "Two seats were never used.",
            "pdf": "https://pay.stripe.com/credit_notes/acct_1Sample/test_Sample/pdf",
        },
        amount_paid=12000,
    )
    bare = _render_input(
        "credit_note",
        {
            "id": "cn_1SampleBare",
            "object": "credit_note",
            "currency": "kwd",
            "lines": {"data": [], "has_more": True},
            "subtotal": 12340,
            "total": 12340,
            "customer_balance_transaction": "cbtxn_1Sample",
        },
        number=None,
        customer_name=None,
        account_name=None,
        currency="kwd",
        amount_paid=12340,
        hosted_invoice_url=None,
    )
    return full, bare
