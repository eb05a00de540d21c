"""The events in examples/ and one way to turn any of them into a receipt, for the tests."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from receipts.receipt.api_facts import ApiFacts, PaymentMethod
from receipts.receipt.derivation import Decision, ReceiptJob, derive_receipt
from receipts.receipt.event import parse_event
from receipts.receipt.payload import render_payload
from receipts.receipt.rendering import Renderer

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FROM = "Billing <billing@example.com>"
VISA = ApiFacts(payment_method=PaymentMethod(kind="card", brand="visa", last4="4242"))


def example_names() -> list[str]:
    """Every example event, by file stem."""
    return sorted(path.stem for path in EXAMPLES.glob("*.json"))


@cache
def _load(name: str) -> str:
    return (EXAMPLES / f"{name}.json").read_text(encoding="utf-8")


def example(name: str) -> dict[str, Any]:
    """A fresh copy of one example event."""
    event: dict[str, Any] = json.loads(_load(name))
    return event


def invoice_of(name: str) -> dict[str, Any]:
    invoice: dict[str, Any] = example(name)["data"]["object"]
    return invoice


@cache
def renderer(locale: str = "en_US", timezone: str = "UTC") -> Renderer:
    """One renderer per locale and zone: building one compiles and tries every template."""
    return Renderer(locale=locale, timezone=timezone)


def derive(event: dict[str, Any], from_address: str = FROM, **options: Any) -> Decision:
    """What ingest would decide for ``event``; zero-value invoices are sent too."""
    options.setdefault("send_zero_value", True)
    return derive_receipt(parse_event(event), email_from=from_address, **options)


def job(event: dict[str, Any], **options: Any) -> ReceiptJob:
    decision = derive(event, **options)
    assert isinstance(decision, ReceiptJob), decision
    return decision


def email(event: dict[str, Any], using: Renderer | None = None, **options: Any) -> dict[str, Any]:
    """The frozen email the worker would make of ``event`` at its first claim."""
    receipt = job(event, **options)
    return render_payload(receipt.message_key, receipt.render_input, using or renderer())
