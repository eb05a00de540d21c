"""Refund receipts and credit notes derived from what ingest looked up: pure functions."""

from __future__ import annotations

from typing import Any

import pytest

from receipts.message_keys import parse_message_key
from receipts.receipt.derivation import Ignored, ReceiptJob, UnsendableReceipt
from receipts.receipt.event import MalformedEvent, parse_event
from receipts.receipt.refunds import (
    Sender,
    charge_invoice_id,
    credit_note_refund_ids,
    derive_credit_note,
    derive_refund,
    listed_refunds,
)
from tests import stripe_events
from tests import stripe_objects as objects

SENDER = Sender(email_from="Billing <billing@example.com>")
INVOICE = objects.invoice(invoice_id="in_1Unit")
REFUND = objects.refund("re_1Unit", "ch_1Unit", "pi_1Unit", amount=500)


def refund_job(refund: dict[str, Any], invoice: dict[str, Any] = INVOICE) -> Any:
    header = parse_event(stripe_events.event(refund, type="refund.updated", account="acct_1U"))
    return derive_refund(header, refund, invoice, sender=SENDER, api_facts=None)


def test_a_succeeded_refund_is_one_row_keyed_by_its_refund_id_claiming_it() -> None:
    job = refund_job(REFUND)
    assert isinstance(job, ReceiptJob)
    assert job.message_key == "acct_1U/test/in_1Unit/refund-re_1Unit"
    assert parse_message_key(job.message_key).purpose == job.purpose == "refund-re_1Unit"
    assert job.claims == ("re_1Unit",) and job.recipient == "jenny.rosen@example.com"
    assert job.render_input["kind"] == "refund" and job.render_input["refund"] is REFUND
    assert set(job.render_input) == {
        "invoice", "created", "from", "reply_to", "api_facts", "kind", "refund",
    }  # fmt: skip


@pytest.mark.parametrize("status", ["pending", "requires_action", "failed", "canceled"])
def test_a_refund_that_has_not_succeeded_is_ignored(status: str) -> None:
    assert refund_job({**REFUND, "status": status}) == Ignored(reason="refund_not_succeeded")


def test_the_fingerprint_is_what_the_refund_tells_not_how_stripe_updates_it() -> None:
    """A refund.updated that only changes the reason or metadata is a duplicate; another
    amount or another recipient is a conflict."""
    same = refund_job({**REFUND, "reason": "duplicate", "metadata": {"note": "x"}})
    other_amount = refund_job({**REFUND, "amount": 600})
    other_to = refund_job(REFUND, {**INVOICE, "customer_email": "ap@example.com"})
    original = refund_job(REFUND).fingerprint
    assert same.fingerprint == original
    assert original not in (other_amount.fingerprint, other_to.fingerprint)


def test_an_invoice_without_a_usable_address_makes_a_review_row() -> None:
    unsendable = refund_job(REFUND, {**INVOICE, "customer_email": None})
    assert isinstance(unsendable, UnsendableReceipt)
    assert unsendable.reason == "missing_customer_email" and unsendable.claims == ("re_1Unit",)


def test_a_credit_note_claims_its_refunds_in_both_api_shapes() -> None:
    """``refunds: [{refund, amount_refunded}]`` since 2025-03-31.basil, ``refund`` before,
    ids or expanded objects; a credit note to the customer's balance claims none."""
    note = objects.credit_note("cn_1Unit", "in_1Unit", refund_id="re_1New")
    assert credit_note_refund_ids(note) == ("re_1New",)
    old = {**note, "refunds": None, "refund": {"id": "re_1Old", "object": "refund"}}
    assert credit_note_refund_ids(old) == ("re_1Old",)
    assert credit_note_refund_ids(objects.credit_note("cn_1Bal", "in_1Unit")) == ()


def test_a_credit_note_of_a_paid_invoice_is_its_own_email() -> None:
    note = objects.credit_note("cn_1Unit", "in_1Unit", refund_id="re_1Unit", amount=1999)
    header = parse_event(stripe_events.event(note, type="credit_note.created"))
    job = derive_credit_note(header, note, INVOICE, sender=SENDER, api_facts=None)
    assert isinstance(job, ReceiptJob)
    assert job.message_key == "platform/test/in_1Unit/credit-note-cn_1Unit"
    assert job.render_input["kind"] == "credit_note" and job.claims == ("re_1Unit",)
    unpaid = derive_credit_note(
        header, note, {**INVOICE, "status": "open"}, sender=SENDER, api_facts=None
    )
    assert unpaid == Ignored(reason="invoice_not_paid")
    void = derive_credit_note(
        header, {**note, "status": "void"}, INVOICE, sender=SENDER, api_facts=None
    )
    assert void == Ignored(reason="credit_note_void")


def test_the_charge_shapes_of_old_and_new_api_versions() -> None:
    """Before 2022-11-15 a charge lists its refunds and names its invoice; today neither."""
    old = objects.refunded_charge("ch_1U", "pi_1U", [REFUND], invoice_id="in_1Unit")
    new = objects.refunded_charge("ch_1U", "pi_1U", [REFUND])
    assert (charge_invoice_id(old), listed_refunds(old)) == ("in_1Unit", [REFUND])
    assert (charge_invoice_id(new), listed_refunds(new)) == (None, None)
    cut_short = {**old, "refunds": {**old["refunds"], "has_more": True}}
    assert listed_refunds(cut_short) is None


def test_a_refund_without_a_refund_id_is_malformed() -> None:
    with pytest.raises(MalformedEvent):
        refund_job({**REFUND, "id": "not-a-refund"})
