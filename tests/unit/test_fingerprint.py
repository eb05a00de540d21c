"""The fingerprint: what the customer is told, never link tokens; and the one stored before v2."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from receipts.ingest.receipt import (
    FINGERPRINT_VERSION,
    ReceiptJob,
    UnsendableReceipt,
    legacy_fingerprint,
)
from tests import stripe_events
from tests.receipt_examples import derive, example, job, renderer


def fingerprints(event: dict[str, Any]) -> tuple[str, str]:
    decision = derive(event)
    assert isinstance(decision, ReceiptJob | UnsendableReceipt), decision
    return decision.fingerprint, decision.legacy_fingerprint


def remint(url: str) -> str:
    """Stripe re-signs its links each time it renders an invoice: a new token, same invoice."""
    return url.replace("test_", "test_Reminted") + "&t=1764460999"


def test_the_fingerprint_is_versioned() -> None:
    """A v2 fingerprint cannot be mistaken for one an earlier release stored."""
    current, legacy = fingerprints(example("invoice_paid"))
    assert current.startswith(f"{FINGERPRINT_VERSION}:sha256:") and len(current) == 3 + 7 + 64
    assert legacy.startswith("sha256:") and not legacy.startswith(FINGERPRINT_VERSION)


def test_reminted_link_tokens_do_not_change_the_fingerprint() -> None:
    """Two honest events for one invoice differ in their hosted and PDF link tokens."""
    first = example("invoice_paid_subscription_update")
    second = copy.deepcopy(first)
    second["id"] = "evt_1QExampleUpgradePaid02"
    invoice = second["data"]["object"]
    invoice["hosted_invoice_url"] = remint(invoice["hosted_invoice_url"])
    invoice["invoice_pdf"] = remint(invoice["invoice_pdf"])
    assert fingerprints(first)[0] == fingerprints(second)[0]


def test_the_rendering_does_not_change_the_fingerprint() -> None:
    """A template deploy or another language between two deliveries is not a conflict."""
    event = example("invoice_paid_jpy")
    assert job(event).fingerprint == job(event, renderer("ja_JP")).fingerprint


@pytest.mark.parametrize(
    "change",
    [
        {"customer_email": "someone.else@example.com"},
        {"amount_paid": 4800},
        {"total": 4800},
        {"currency": "eur"},
        {"id": "in_1QExampleOther000001"},
    ],
)
def test_what_the_customer_is_told_changes_the_fingerprint(change: dict[str, Any]) -> None:
    """Recipient, amount paid, total, currency and invoice are in it."""
    event = example("invoice_paid")
    changed = copy.deepcopy(event)
    changed["data"]["object"].update(change)
    assert fingerprints(event)[0] != fingerprints(changed)[0]


def test_a_line_amount_changes_the_fingerprint() -> None:
    """Each line's amount is in it, so a re-itemized invoice is a conflict, not a duplicate."""
    event = example("invoice_paid_subscription_update")
    changed = copy.deepcopy(event)
    changed["data"]["object"]["lines"]["data"][0]["amount"] = -951
    assert fingerprints(event)[0] != fingerprints(changed)[0]


def test_recipient_case_and_spaces_do_not_matter() -> None:
    """The address is compared as mail servers do: trimmed and in one case."""
    event = example("invoice_paid")
    shouting = copy.deepcopy(event)
    shouting["data"]["object"]["customer_email"] = "  Jenny.Rosen@Example.com "
    assert fingerprints(event) == fingerprints(shouting)


# Fingerprints the release before v2 stored for these events (computed with it).
STORED_BEFORE_V2 = {
    "invoice_paid": "sha256:8867eef2b59e58db5598dfe5d478d2debf572656a5bddb6035fc5ae0878db280",
    "invoice_paid_connect": (
        "sha256:13c89424fc63bb1f14b1c0c4a38ca8c8229798b9a3f0cb8853bce298a19b5213"
    ),
    "invoice_paid_zero_value": (
        "sha256:dde02a07bf33c811115b28b568f3d54fe7a010f6e3a1455a96fe98639d5188fa"
    ),
}
# and for review rows made from the first example with one field changed.
STORED_REVIEW_BEFORE_V2 = [
    (
        {"customer_email": None},
        "sha256:d1dc9e701d06932491b62f49d5b86a8c1c5afc3502ea3cda88e1e5118b93e9f9",
    ),
    (
        {"hosted_invoice_url": "https://pay.stripe.com/invoice/acct_1QExampleAcme01/invst_Old01"},
        "sha256:4445edac031e211a652f42a59ff510ed3f5b2120a515add227f9b4f7b6d7a5b9",
    ),
    (
        {"amount_paid": "4900"},
        "sha256:4b7a7f448fdca907e3d33e4ff9b478a5ae3d16f8f1e49670dc8e5dfcbe65cdcd",
    ),
    (
        {"amount_paid": {"value": [4900]}},
        "sha256:9d667e7e3d1cf370f9416bafdefd93a57207fe90fd4fd96474f175a90d1aa4e8",
    ),
]


@pytest.mark.parametrize(("name", "stored"), sorted(STORED_BEFORE_V2.items()))
def test_legacy_fingerprint_reproduces_what_earlier_releases_stored(name: str, stored: str) -> None:
    """Rows stored before the upgrade carry these; a redelivery must still match them."""
    event = example(name)
    invoice = event["data"]["object"]
    assert legacy_fingerprint(invoice["id"], invoice) == stored
    assert fingerprints(event)[1] == stored


@pytest.mark.parametrize(("change", "stored"), STORED_REVIEW_BEFORE_V2)
def test_legacy_fingerprint_of_review_rows(change: dict[str, Any], stored: str) -> None:
    """Review rows (no email, an old link, a mistyped amount) kept the same definition."""
    event = example("invoice_paid")
    event["data"]["object"].update(change)
    assert fingerprints(event)[1] == stored


def test_a_hostile_value_cannot_break_the_fingerprint() -> None:
    """Deeply nested or non-scalar values hash by their type, never by recursing into them."""
    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    invoice = stripe_events.invoice(amount_paid=deep, total={"a": deep}, currency=deep)
    current, legacy = fingerprints(stripe_events.event(invoice))
    assert current.startswith("v2:") and legacy.startswith("sha256:")
