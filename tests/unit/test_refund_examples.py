"""The refund and credit-note examples (examples/refunds/) mean what the README says.

Each event is derived as the webhook derives it, against the fake Stripe API
seeded with ``examples/refunds/stripe_api_seed.json`` (the seed a developer
gives ``python -m tests.fake_stripe_api --seed``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from receipts.config import load_settings
from receipts.ingest.deriving import ReceiptDeriver
from receipts.receipt.derivation import Decision, Ignored, ReceiptJob, Several
from receipts.receipt.event import parse_event
from receipts.stripe_api.client import StripeApi
from tests.fake_stripe_api import running_fake_stripe_api

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "refunds"
KEY = "platform/test/in_1QExamplePaid00000001/"
PARTIAL = KEY + "refund-re_3QExampleRefund00000001"
WITH_REFUND = KEY + "credit-note-cn_1QExampleCredit0000001"
TO_BALANCE = KEY + "credit-note-cn_1QExampleCredit0000002"
EXPECTED = {
    # Both refunds of the charge: the partial one's own email, and the rest, which the
    # credit note carries: its email is the credit note's.
    "charge_refunded_2022_08_01": sorted([PARTIAL, WITH_REFUND]),
    "charge_refunded_basil": sorted([PARTIAL, WITH_REFUND]),
    "refund_created": [WITH_REFUND],
    "refund_created_partial": [PARTIAL],
    "refund_updated_pending": ["refund_not_succeeded"],
    "credit_note_created_with_refund": [WITH_REFUND],
    "credit_note_created_to_balance": [TO_BALANCE],
}


@pytest.fixture(scope="module")
def deriver() -> Iterator[ReceiptDeriver]:
    seed = json.loads((EXAMPLES / "stripe_api_seed.json").read_text(encoding="utf-8"))
    with running_fake_stripe_api("rk_test_examples") as stripe_api:
        stripe_api.add(**seed)
        settings = load_settings(
            {
                "EMAIL_FROM": "Billing <billing@example.com>",
                "STRIPE_API_KEY": "rk_test_examples",
                "STRIPE_API_BASE": stripe_api.url,
            }
        )
        yield ReceiptDeriver(settings, StripeApi.from_settings(settings))


def meaning(decision: Decision) -> list[str]:
    """The keys of the emails, or the reason there is none."""
    decisions = decision.decisions if isinstance(decision, Several) else (decision,)
    return sorted(one.reason if isinstance(one, Ignored) else one.message_key for one in decisions)


def test_every_refund_example_is_listed() -> None:
    names = {path.stem for path in EXAMPLES.glob("*.json")} - {"stripe_api_seed"}
    assert names == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_refund_example_means_its_emails(deriver: ReceiptDeriver, name: str) -> None:
    event: dict[str, Any] = json.loads((EXAMPLES / f"{name}.json").read_text(encoding="utf-8"))
    decision = deriver.derive(parse_event(event))
    assert meaning(decision) == EXPECTED[name]
    jobs = decision.decisions if isinstance(decision, Several) else (decision,)
    for job in jobs:
        if isinstance(job, ReceiptJob):
            assert job.recipient == "jenny.rosen@example.com"
            assert job.render_input["invoice"]["number"] == "ACME-0042"
