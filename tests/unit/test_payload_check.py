"""The worker's check of a frozen email: only what the product writes goes out."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from receipts.config import load_settings
from receipts.delivery.payload_check import payload_problem

KEY = "platform/live/in_1Check/invoice-paid"
SETTINGS = load_settings(
    {"EMAIL_FROM": "Billing <billing@shop.example>", "RECEIPTS_REPLY_TO": "help@shop.example"}
)
PDF = {
    "filename": "receipt-A-1.pdf",
    "content": base64.b64encode(b"%PDF-1.4 ...").decode(),
    "content_type": "application/pdf",
}
FOREIGN = "fields the product does not write: "
NOT_ONE_PDF = "attachments are not one PDF"


def ours(**changes: Any) -> bytes:
    document: dict[str, Any] = {
        "from": "Billing <billing@shop.example>",
        "to": ["jenny@example.com"],
        "subject": "Receipt",
        "text": "Thanks",
        "html": "<p>Thanks</p>",
        "tags": [{"name": "message_key", "value": "platform_live_in_1Check_invoice-paid"}],
        "reply_to": "help@shop.example",
        "attachments": [PDF],
    }
    document.update(changes)
    return json.dumps({k: v for k, v in document.items() if v is not None}).encode()


def test_what_the_product_writes_passes() -> None:
    assert payload_problem(KEY, ours(), SETTINGS) is None
    # a display name changed between ingest and the claim, no reply-to, no PDF, no tag
    plain = ours(**{"from": "Shop <BILLING@shop.example>"}, reply_to=None, attachments=None)
    assert payload_problem(KEY, plain, SETTINGS) is None
    assert payload_problem(KEY, ours(tags=None), SETTINGS) is None


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"bcc": ["x@evil.example"] * 49, "cc": ["y@evil.example"]}, f"{FOREIGN}bcc, cc"),
        ({"headers": {"X-Evil": "1"}}, f"{FOREIGN}headers"),
        ({"scheduled_at": "in 1 min"}, f"{FOREIGN}scheduled_at"),
        ({"from": "ceo@shop.example"}, "from is not EMAIL_FROM"),
        ({"to": ["a@example.com", "b@example.com"]}, "to is not one address"),
        ({"tags": [{"name": "message_key", "value": "x"}]}, "tags are not the message key's own"),
        ({"reply_to": "thief@evil.example"}, "reply_to is not RECEIPTS_REPLY_TO"),
        ({"attachments": [PDF, PDF]}, "attachments are not one PDF"),
        ({"attachments": [PDF | {"filename": "invoice.exe"}]}, "attachments are not one PDF"),
        ({"attachments": [PDF | {"path": "https://evil.example/x"}]}, NOT_ONE_PDF),
        ({"attachments": [PDF | {"content_type": "text/html"}]}, "attachments are not one PDF"),
    ],
)  # fmt: skip
def test_anything_else_is_named(changes: dict[str, Any], problem: str) -> None:
    assert payload_problem(KEY, ours(**changes), SETTINGS) == problem


def test_without_email_from_the_worker_checks_the_fields_but_not_the_sender() -> None:
    """A worker not given EMAIL_FROM cannot tell whose sender it is; it still refuses
    fields the product never writes."""
    unset = load_settings({})
    assert payload_problem(KEY, ours(**{"from": "other@shop.example"}), unset) is None
    assert payload_problem(KEY, ours(bcc=["x@evil.example"]), unset) is not None
    assert payload_problem(KEY, b"[]", unset) == "not a JSON object"
