"""Refund receipts and credit notes: what each says, in every language, and what goes to review."""

from __future__ import annotations

import copy
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from receipts.config import ConfigError
from receipts.receipt.after_payment import CreditNoteDoesNotAddUp, read_credit_note, read_refund
from receipts.receipt.catalogs import LANGUAGES
from receipts.receipt.invoice_values import UnusableInvoice
from receipts.receipt.payload import render_payload
from receipts.receipt.rendering import Renderer
from receipts.receipt.samples import sample_credit_note_inputs, sample_refund_inputs
from receipts.vocabulary import ReviewReason
from tests.receipt_examples import EXAMPLES, example, job, renderer

RENDER_INPUTS = EXAMPLES / "render_input"
REFUND_KEY = "platform/test/in_1QExamplePaid00000001/refund-re_3QExampleRefund0001"
CREDIT_KEY = "platform/test/in_1QExamplePaid00000001/credit-note-cn_1QExampleCredit0001"
CARD = {"kind": "card", "brand": "visa", "last4": "4242"}


def stored(name: str) -> dict[str, Any]:
    """A fresh copy of one render input in examples/render_input/."""
    document: dict[str, Any] = json.loads((RENDER_INPUTS / f"{name}.json").read_text("utf-8"))
    return document


def with_method(render_input: dict[str, Any], method: dict[str, Any] | None) -> dict[str, Any]:
    changed = copy.deepcopy(render_input)
    changed["api_facts"] = {**(changed.get("api_facts") or {}), "payment_method": method}
    return changed


def configured_language(render_input: dict[str, Any]) -> dict[str, Any]:
    """The input without the customer's preferred locales: the renderer's locale decides."""
    render_input["api_facts"]["preferred_locales"] = []
    return render_input


def refund_email(render_input: dict[str, Any], using: Renderer | None = None) -> dict[str, Any]:
    return render_payload(REFUND_KEY, render_input, using or renderer())


def credit_email(render_input: dict[str, Any], using: Renderer | None = None) -> dict[str, Any]:
    return render_payload(CREDIT_KEY, render_input, using or renderer())


# Dispatch


def test_render_payload_dispatches_on_the_kind() -> None:
    """No kind: the receipt; refund and credit_note: their own emails, the same payload shape."""
    receipt = job(example("invoice_paid"))
    paid = render_payload(receipt.message_key, receipt.render_input, renderer())
    refund = refund_email(stored("refund_partial"))
    credit = credit_email(stored("credit_note_with_refund"))
    assert paid["subject"].startswith("Receipt from Acme Tools, Inc.")
    assert refund["subject"] == "Refund from Acme Tools, Inc. for invoice ACME-0042"
    assert credit["subject"] == (
        "Credit note ACME-0042-CN-01 from Acme Tools, Inc. for invoice ACME-0042"
    )
    for payload in (paid, refund, credit):
        assert set(payload) == {"from", "to", "subject", "text", "html", "tags"}
        assert payload["to"] == ["jenny.rosen@example.com"]
        assert payload["from"] == "Acme Billing <billing@acme.example>" or payload is paid
    assert refund["tags"] == [{"name": "message_key", "value": REFUND_KEY.replace("/", "_")}]


def test_an_unknown_kind_goes_to_review() -> None:
    render_input = {**stored("refund_partial"), "kind": "dispute"}
    with pytest.raises(UnusableInvoice):
        refund_email(render_input)


def test_the_recipient_is_the_invoices_customer_email() -> None:
    """Without a usable address the row goes to review with the receipt's reason."""
    render_input = stored("refund_partial")
    render_input["invoice"]["customer_email"] = "  jonas@example.com "
    assert refund_email(render_input)["to"] == ["jonas@example.com"]
    render_input["invoice"]["customer_email"] = None
    with pytest.raises(UnusableInvoice) as raised:
        refund_email(render_input)
    assert raised.value.reason == ReviewReason.MISSING_CUSTOMER_EMAIL
    render_input["invoice"]["customer_email"] = "not an address"
    with pytest.raises(UnusableInvoice) as raised:
        credit_email({**stored("credit_note_with_refund"), "invoice": render_input["invoice"]})
    assert raised.value.reason == ReviewReason.INVALID_CUSTOMER_EMAIL


def test_the_language_is_the_customers_preferred_one() -> None:
    render_input = stored("refund_partial")
    render_input["api_facts"]["preferred_locales"] = ["ja-JP", "en"]
    payload = refund_email(render_input)
    assert payload["subject"] == "Acme Tools, Inc.からの返金（請求書 ACME-0042）"  # noqa: RUF001
    assert '<html lang="ja">' in payload["html"]


# The refund receipt


def test_a_partial_refund_says_how_much_of_what_was_paid() -> None:
    text = refund_email(stored("refund_partial"))["text"]
    assert (
        "Acme Tools, Inc. has issued a partial refund of $20.00 of the $49.00 you paid "
        "for invoice ACME-0042." in text
    )
    assert "Amount refunded: $20.00\nRefunded on: December 6, 2025\n" in text
    assert "Reason: Requested by you" in text
    assert "Amount paid: $49.00" in text
    assert "View the invoice: https://invoice.stripe.com/i/acct_1QExampleAcme01/" in text


def test_a_full_refund_says_the_amount_without_partial() -> None:
    render_input = stored("refund_partial")
    render_input["refund"]["amount"] = 4900
    text = refund_email(render_input)["text"]
    assert "Acme Tools, Inc. has refunded $49.00 for invoice ACME-0042." in text
    assert "partial" not in text


@pytest.mark.parametrize(
    ("method", "destination", "timing"),
    [
        (
            CARD,
            "The money goes back to the payment method you paid with: Visa ending in 4242.",
            "within 5 to 10 business days",
        ),
        (
            {"kind": "sepa_debit", "brand": None, "last4": "3000"},
            "you paid with: SEPA Direct Debit ending in 3000.",
            "depends on your bank; it usually takes a few business days.",
        ),
        (
            None,
            "The money goes back to the payment method you paid with.\n",
            "How soon you see the money depends on your bank or card issuer.",
        ),
    ],
)
def test_where_the_money_goes_and_when(
    method: dict[str, Any] | None, destination: str, timing: str
) -> None:
    """Cards: Stripe's 5-10 business days; other methods and none: a neutral sentence."""
    render_input = with_method(stored("refund_partial"), method)
    render_input["refund"]["destination_details"] = None
    text = refund_email(render_input)["text"]
    assert destination in text and timing in text
    assert ("Refunded to:" in text) is (method is not None)


def test_the_refunds_own_destination_names_the_card_when_the_api_did_not() -> None:
    render_input = with_method(stored("refund_partial"), None)
    render_input["refund"]["destination_details"] = {
        "type": "card",
        "card": {"brand": "mastercard", "last4": "4444"},
    }
    assert "Refunded to: Mastercard ending in 4444" in refund_email(render_input)["text"]


def test_fraudulent_is_never_shown_to_the_customer() -> None:
    render_input = stored("refund_partial")
    render_input["refund"]["reason"] = "fraudulent"
    payload = refund_email(render_input)
    for part in ("subject", "text", "html"):
        assert "fraud" not in payload[part].lower()
    assert "Reason" not in payload["text"]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"amount": 0}, ReviewReason.INVALID_INVOICE_AMOUNTS),
        ({"amount": "20.00"}, ReviewReason.INVALID_INVOICE_AMOUNTS),
        ({"currency": "US$"}, ReviewReason.INVALID_CURRENCY),
        ({"status": "failed"}, ReviewReason.INVALID_INVOICE_AMOUNTS),
        ({"amount": 5000}, ReviewReason.RECEIPT_DOES_NOT_ADD_UP),  # more than was paid
    ],
)
def test_a_refund_that_cannot_be_announced_goes_to_review(
    change: dict[str, Any], reason: str
) -> None:
    render_input = stored("refund_partial")
    render_input["refund"].update(change)
    with pytest.raises(UnusableInvoice) as raised:
        read_refund(render_input)
    assert raised.value.reason == reason


def test_a_link_off_stripes_hosts_is_left_out() -> None:
    render_input = stored("refund_partial")
    render_input["invoice"]["hosted_invoice_url"] = "https://evil.example\\@invoice.stripe.com/i/x"
    payload = refund_email(render_input)
    assert "evil" not in payload["text"] and "evil" not in payload["html"]
    assert "View the invoice" not in payload["text"]


# The credit note


def test_a_credit_note_lists_its_lines_totals_and_settlement() -> None:
    text = credit_email(stored("credit_note_with_refund"))["text"]
    assert "Acme Tools, Inc. has issued a credit note of $29.00 for invoice ACME-0042." in text
    assert "- Pro plan: unused days in December: $29.00" in text
    assert "Total credited: $29.00" in text
    assert "- Refunded to Visa ending in 4242: $20.00\n" in text
    assert "- Added to your credit balance: $9.00\n" in text
    assert "within 5 to 10 business days" in text
    assert "Reason: Order change" in text
    assert "Downgraded on December 6; the rest of the month is credited." in text
    assert "Download the credit note (PDF): https://pay.stripe.com/credit_notes/" in text


def test_the_settlement_rows_add_up_to_the_total() -> None:
    """Every way of settling, stated or inferred from a bare id, sums to the credit note's total."""
    for render_input in (
        stored("credit_note_with_refund"),
        stored("credit_note_to_balance"),
        *sample_credit_note_inputs(),
    ):
        facts = read_credit_note(render_input)
        assert facts.settlement.total == facts.total
    balance = read_credit_note(stored("credit_note_to_balance"))
    assert (balance.settlement.credited, balance.settlement.refunded) == (2900, 0)


def test_a_refund_named_only_by_id_gets_what_the_other_parts_leave() -> None:
    """Before basil a credit note names its refund by id: the rest of the total is refunded."""
    render_input = stored("credit_note_with_refund")
    note = render_input["credit_note"]
    note["refunds"], note["refund"] = [], "re_3QExampleRefund0001"
    note["out_of_band_amount"] = 400
    settled = read_credit_note(render_input).settlement
    assert (settled.refunded, settled.credited, settled.out_of_band) == (1600, 900, 400)
    text = credit_email(render_input)["text"]
    assert "- Settled separately: $4.00" in text


def test_the_full_sample_adds_up_row_by_row() -> None:
    """Lines - discount + shipping + tax = total = refunded + credited + out of band."""
    text = render_payload(CREDIT_KEY, sample_credit_note_inputs()[0], renderer())["text"]
    rows = [
        "Subtotal: $103.00",
        "Discount: -$10.00",
        "Shipping: $5.00",
        "Tax: $9.30",
        "Total credited: $107.30",
        "- Refunded to your payment method: $50.00",
        "- Added to your credit balance: $30.00",
        "- Settled separately: $27.30",
    ]
    for row in rows:
        assert row in text
    assert 10300 - 1000 + 500 + 930 == 10730 == 5000 + 3000 + 2730


@pytest.mark.parametrize(
    ("change", "numbers"),
    [
        ({"subtotal": 3000}, "lines 2900 - line discounts 0 = 2900, but the subtotal is 3000"),
        ({"total": 3100, "amount": 3100}, "= 2900, but the total is 3100"),
        ({"amount": 2800}, "amount 2800, but the total is 2900"),
        ({"out_of_band_amount": 500}, "refunded 2000 + credited 900 + out of band 500"),
        (
            {"refunds": [], "refund": "re_1", "customer_balance_transaction": "cbtxn_1"},
            "the refund and the balance credit carry no amounts",
        ),
    ],
)
def test_a_credit_note_that_does_not_add_up_goes_to_review(
    change: dict[str, Any], numbers: str
) -> None:
    """Like a receipt: refused with the numbers, never sent."""
    render_input = stored("credit_note_with_refund")
    render_input["credit_note"].update(change)
    with pytest.raises(CreditNoteDoesNotAddUp) as raised:
        credit_email(render_input)
    assert raised.value.reason == ReviewReason.RECEIPT_DOES_NOT_ADD_UP
    assert numbers in str(raised.value)


def test_lines_with_a_discount_show_it_once() -> None:
    """Stripe's subtotal has line discounts off; the email shows the lines, then the discount."""
    render_input = stored("credit_note_with_refund")
    note = render_input["credit_note"]
    note["lines"]["data"][0].update(amount=3400, discount_amount=500)
    note.update(discount_amount=500)
    text = credit_email(render_input)["text"]
    assert "- Pro plan: unused days in December: $34.00" in text
    assert "Subtotal: $34.00\nDiscount: -$5.00\nTotal credited: $29.00" in text


def test_the_memo_is_one_line_of_plain_text() -> None:
    render_input = stored("credit_note_with_refund")
    render_input["credit_note"]["memo"] = "Sorry!\n\nURGENT: <b>pay</b> at https://evil.example"
    payload = credit_email(render_input)
    assert "Sorry! URGENT: <b>pay</b> at https://evil.example" in payload["text"]
    assert "&lt;b&gt;pay&lt;/b&gt;" in payload["html"] and "<b>pay" not in payload["html"]


# Every language


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_language_renders_both_kinds_with_its_amounts(language: str) -> None:
    """The amounts as the locale writes them, the same in subject, text and HTML."""
    using = renderer(language)
    refund = refund_email(configured_language(stored("refund_partial")), using)
    credit = credit_email(configured_language(stored("credit_note_with_refund")), using)
    money = {"en": "$20.00", "de": "20,00\u00a0$", "fr": "20,00\u00a0$US", "es": "20,00\u00a0US$"}
    if language in money:
        assert money[language] in refund["html"]
        assert money[language].replace("\u00a0", " ") in refund["text"]
    for payload in (refund, credit):
        assert f'<html lang="{language.split("_")[0]}">' in payload["html"]
        assert "%(" not in payload["text"] and "%(" not in payload["html"]


class _UnbrokenCells(HTMLParser):
    """The text of each table cell the HTML keeps on one line (``white-space:nowrap``)."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[str] = []
        self._open: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        style = (dict(attrs).get("style") or "").replace(" ", "")
        if tag == "td" and "white-space:nowrap" in style:
            self._open = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._open is not None:
            self.cells.append(" ".join("".join(self._open).split()))
            self._open = None

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open.append(data)


def unbroken_cells(html: str) -> list[str]:
    parser = _UnbrokenCells()
    parser.feed(html)
    return parser.cells


@pytest.mark.parametrize("language", LANGUAGES)
def test_only_amounts_are_kept_on_one_line(language: str) -> None:
    """On a phone (390 px) a cell that may not wrap widens the email past the screen.

    A label, a date or a payment method in a long language ("Número de nota
    de crédito", "30 de noviembre de 2025, 0:00 UTC") must be free to wrap;
    only short amounts stay whole.
    """
    using = renderer(language)
    for payload in (
        refund_email(configured_language(stored("refund_partial")), using),
        refund_email(configured_language(stored("refund_full_sepa")), using),
        credit_email(configured_language(stored("credit_note_with_refund")), using),
    ):
        for cell in unbroken_cells(payload["html"]):
            assert len(cell) <= 16, cell


# Templates a team owns


def test_an_override_of_a_refund_template_is_used(tmp_path: Path) -> None:
    folder = tmp_path / "refund"
    folder.mkdir()
    (folder / "subject.txt").write_text("Money back: {{ refund.amount }}", encoding="utf-8")
    payload = refund_email(stored("refund_partial"), Renderer(template_dir=tmp_path))
    assert payload["subject"] == "Money back: $20.00"


def test_a_broken_credit_note_override_stops_the_start_naming_the_file(tmp_path: Path) -> None:
    """The samples go through the credit note templates at start, as they do for receipts."""
    folder = tmp_path / "credit_note"
    folder.mkdir()
    (folder / "body.txt").write_text("{{ credit_note.totl }}", encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        Renderer(template_dir=tmp_path)
    assert str(raised.value).startswith(
        "RECEIPTS_TEMPLATE_DIR: credit_note/body.txt line 1: UndefinedError"
    )


def test_the_samples_render_in_every_language() -> None:
    for language in LANGUAGES:
        using = renderer(language)
        for render_input in sample_refund_inputs():
            assert render_payload(REFUND_KEY, render_input, using)["text"]
        for render_input in sample_credit_note_inputs():
            assert render_payload(CREDIT_KEY, render_input, using)["text"]


def test_a_copy_for_the_books_goes_to_its_address_with_the_same_content() -> None:
    customer = refund_email(stored("refund_partial"))
    copy_input = {**stored("refund_partial"), "copy_to": "books@acme.example"}
    books = render_payload(REFUND_KEY + "-copy", copy_input, renderer())
    assert books["to"] == ["books@acme.example"]
    assert (books["subject"], books["text"], books["html"]) == (
        customer["subject"],
        customer["text"],
        customer["html"],
    )
