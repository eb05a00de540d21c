"""The refund receipt's PDF (RECEIPTS_ATTACH_PDF): what the refund email says, read back.

Each PDF is read back with pdftotext (:mod:`tests.pdf_text`) and compared
with the refund email's own text part: the same names, amounts and invoice
number, in the same language.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from receipts.receipt.after_payment import read_refund
from receipts.receipt.api_facts import api_facts_from_document
from receipts.receipt.payload import render_payload
from receipts.receipt.pdf import FILENAME
from receipts.receipt.rendering import Renderer
from tests.pdf_text import shown, text_of
from tests.receipt_examples import EXAMPLES

KEY = "platform/test/in_1QExamplePaid00000001/refund-re_3QExampleRefund0001"
CREDIT_KEY = "platform/test/in_1QExamplePaid00000001/credit-note-cn_1QExampleCredit0001"
SUPPORT = "help@acme.example"
ATTACHING = Renderer(support_email=SUPPORT, attach_pdf=True)
PLAIN = Renderer(support_email=SUPPORT)


def stored(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(
        (EXAMPLES / "render_input" / f"{name}.json").read_text("utf-8")
    )
    return document


def billed(language: str) -> dict[str, Any]:
    """The partial refund, in ``language``, of an invoice with an address and both tax ids."""
    render_input = stored("refund_partial")
    invoice = render_input["invoice"]
    invoice["account_name"] = "株式会社サンプル" if language == "ja" else "Acme Tools, Inc."
    invoice["customer_name"] = "山田 太郎" if language == "ja" else "Jenny Rosen"
    invoice["customer_address"] = {"line1": "Unter den Linden 1", "postal_code": "10117",
                                   "city": "Berlin", "country": "DE"}  # fmt: skip
    invoice["customer_tax_ids"] = [{"type": "eu_vat", "value": "DE123456789"}]
    render_input["api_facts"]["merchant_tax_ids"] = [{"type": "us_ein", "value": "12-3456789"}]
    render_input["api_facts"]["preferred_locales"] = [language]
    return render_input


def pdf_of(payload: dict[str, Any]) -> bytes:
    [attached] = payload["attachments"]
    assert attached["content_type"] == "application/pdf"
    return base64.b64decode(attached["content"], validate=True)


def facts_in_both(render_input: dict[str, Any]) -> tuple[str, str, list[str | None]]:
    """The email's text, the PDF's text, and what the refund email shows of the refund."""
    payload = render_payload(KEY, render_input, ATTACHING)
    known = api_facts_from_document(render_input["api_facts"])
    view = ATTACHING.present_refund(
        read_refund(render_input),
        locale=ATTACHING.choose_locale(known.preferred_locales),
        payment_method=known.payment_method,
        sender=render_input["from"],
    ).view
    figures = [view.amount, view.invoice.amount_paid, view.invoice.number, view.refunded_at]
    names = [view.merchant, view.customer_name, view.payment_method]
    return str(payload["text"]), text_of(pdf_of(payload)), [*figures, *names]


@pytest.mark.parametrize("language", ["ja", "en"])
def test_the_pdf_reads_back_with_the_emails_names_amounts_and_invoice_number(
    language: str,
) -> None:
    email, pdf, shown_in_email = facts_in_both(billed(language))
    for value in shown_in_email:
        assert value and shown(value) in shown(email), value
        assert shown(value) in pdf, value
    assert ("株式会社サンプル" if language == "ja" else "Acme Tools, Inc.") in pdf
    assert "$20.00" in pdf and "$49.00" in pdf and "ACME-0042" in pdf
    for extra in ("jenny.rosen@example.com", "Unter den Linden 1", "10117 Berlin", "DE123456789",
                  "12-3456789", SUPPORT):  # fmt: skip
        assert extra in pdf, extra


def test_the_pdf_says_what_the_email_says_in_its_language() -> None:
    """Where the money goes and when, who was billed, both tax ids; lines wrapped in the
    PDF are compared without their spaces."""
    for language, also in (
        ("ja", ("請求先", "ドイツ", "お客様の税番号", "販売者の税番号", "返金額$20.00")),
        ("en", ("Billed to", "Germany", "Your tax ID", "Seller's tax ID", "Amount refunded")),
    ):
        email, pdf, _ = facts_in_both(billed(language))
        sentences = email.split("\n\n")[1].splitlines()  # after the greeting
        assert len(sentences) == 3
        for expected in (*sentences, *also):
            assert shown(expected).replace(" ", "") in pdf.replace(" ", ""), expected


def test_the_same_refund_is_the_same_bytes_dated_by_the_refund() -> None:
    first = pdf_of(render_payload(KEY, billed("ja"), ATTACHING))
    again = Renderer(support_email=SUPPORT, attach_pdf=True)
    assert pdf_of(render_payload(KEY, billed("ja"), again)) == first
    assert b"/CreationDate (D:20251206000000+00'00')" in first  # the refund's "created"
    assert len(first) < 100_000


def test_the_payload_carries_the_pdf_only_when_receipts_attach_pdf_is_on() -> None:
    """Named refund-<invoice number>.pdf: never the name of the invoice's receipt."""
    attaching = render_payload(KEY, stored("refund_partial"), ATTACHING)
    [attached] = attaching["attachments"]
    assert attached["filename"] == "refund-ACME-0042.pdf"
    assert FILENAME.fullmatch(attached["filename"])
    plain = render_payload(KEY, stored("refund_partial"), PLAIN)
    assert "attachments" not in plain
    assert {key: value for key, value in attaching.items() if key != "attachments"} == plain


def test_the_copy_for_the_books_carries_the_customers_pdf() -> None:
    customer = render_payload(KEY, stored("refund_partial"), ATTACHING)
    books_input = {**stored("refund_partial"), "copy_to": "books@acme.example"}
    books = render_payload(KEY + "-copy", books_input, ATTACHING)
    assert books["to"] == ["books@acme.example"]
    assert books["attachments"] == customer["attachments"]


def test_a_credit_note_attaches_no_pdf_of_ours() -> None:
    """Its email links Stripe's own credit note PDF."""
    note = copy.deepcopy(stored("credit_note_with_refund"))
    assert "attachments" not in render_payload(CREDIT_KEY, note, ATTACHING)
