"""The PDF receipt (RECEIPTS_ATTACH_PDF): what a customer reads in it, read back with pdftotext.

Each PDF is read back as text by poppler's ``pdftotext``: a glyph the fonts lack, or a
string drawn in the wrong font, would not come back as the same characters.
"""

from __future__ import annotations

import base64
import re
from dataclasses import replace
from typing import Any

import pytest

from receipts.config import ConfigError
from receipts.receipt.derivation import ReceiptJob, derive_receipt
from receipts.receipt.event import parse_event
from receipts.receipt.invoice_facts import ReceiptFacts
from receipts.receipt.payload import render_payload
from receipts.receipt.pdf import (
    FILENAME,
    MAX_ATTACHMENT_BASE64,
    ReceiptPdfTooLarge,
    attachment,
    attachment_filename,
    receipt_pdf,
)
from receipts.receipt.pdf_fonts import width
from receipts.receipt.pdf_layout import wrap
from receipts.receipt.rendering import Renderer
from receipts.receipt.samples import SAMPLE_PAYMENT_METHOD, sample_receipts
from tests import stripe_events
from tests.pdf_text import shown, text_of

RENDERER = Renderer(support_email="support@example.com", attach_pdf=True)
FULL = sample_receipts()[0]
JAPANESE = replace(
    FULL,
    merchant="株式会社サンプル",
    customer_name="山田 太郎",
    customer_address=("千代田区丸の内1-1-1", "東京都 100-0005"),
    customer_country="JP",
)


def email_of(facts: ReceiptFacts, locale: str) -> tuple[Any, str]:
    """The view the email's templates get, and the PDF's text."""
    presented = RENDERER.present(facts, locale=locale, payment_method=SAMPLE_PAYMENT_METHOD)
    pdf = receipt_pdf(RENDERER, facts, locale=locale, payment_method=SAMPLE_PAYMENT_METHOD)
    assert pdf.startswith(b"%PDF-")
    return presented.view, text_of(pdf)


def every_figure(view: Any) -> list[str]:
    return [
        view.total, view.amount_paid, view.subtotal, view.credit_applied_negative,
        *(line.amount for line in view.lines), *(row.amount for row in view.discounts),
        *(row.amount for row in (*view.taxes, *view.included_taxes)),
    ]  # fmt: skip


def test_a_japanese_receipt_reads_back_in_japanese_with_the_emails_figures() -> None:
    view, text = email_of(JAPANESE, "ja_JP")
    for expected in (
        "株式会社サンプル",
        "株式会社サンプルからの領収書\uff08請求書 SAMPLE-0001\uff09",
        "領収書番号",
        "請求書番号",
        "お支払い日時",
        "お支払い方法",
        "Visa\uff08末尾 4242\uff09",
        "お客様の税番号",
        "販売者の税番号",
        "請求先",
        "山田 太郎",
        "東京都 100-0005",
        "日本",
        "明細",
        "小計",
        "合計",
        "お支払い方法への請求額",
        "support@example.com",
    ):
        assert expected in text, expected
    for figure in (*every_figure(view), view.paid_at, view.customer_tax_ids, view.merchant_tax_ids):
        assert shown(figure) in text, figure


def test_an_english_receipt_reads_back_with_the_emails_figures() -> None:
    view, text = email_of(FULL, "en_US")
    for expected in (
        "Sample Shop", "Receipt from Sample Shop for invoice SAMPLE-0001", "Receipt number",
        "Invoice number SAMPLE-0001", "Paid on", "Payment method Visa ending in 4242",
        "Your tax ID", "Seller's tax ID", "Billed to", "Jenny Rosen", "Items", "2 \u00d7 Pro",
        "Subtotal", "Total", "Amount charged", "and 3 more items on the invoice",
        "Questions about this receipt? Write to support@example.com.",
    ):  # fmt: skip
        assert expected in text, expected
    for figure in (*every_figure(view), view.paid_at, view.customer_tax_ids, view.merchant_tax_ids):
        assert shown(figure) in text, figure


def test_names_in_other_scripts_come_back_whole() -> None:
    """Latin Extended, Cyrillic and Greek from Noto Sans, kanji from Noto Sans JP."""
    facts = replace(FULL, customer_name="Łukasz Őry Анна Δήμητρα 髙橋 﨑")
    _, text = email_of(facts, "de_DE")
    assert "Łukasz Őry Анна Δήμητρα 髙橋 﨑" in text


def test_the_same_receipt_is_the_same_bytes_dated_by_its_payment() -> None:
    first = receipt_pdf(RENDERER, JAPANESE, locale="ja_JP")
    again = Renderer(support_email="support@example.com", attach_pdf=True)
    assert receipt_pdf(again, JAPANESE, locale="ja_JP") == first
    paid = FULL.paid_at
    assert paid == 1764460800
    assert b"/CreationDate (D:20251130000000+00'00')" in first


def test_a_long_receipt_runs_onto_more_pages() -> None:
    details = replace(FULL.details, memo="A long note. " * 600)
    pdf = receipt_pdf(RENDERER, replace(FULL, details=details))
    assert len(re.findall(rb"/Type /Page[^s]", pdf)) >= 2
    assert "A long note." in text_of(pdf) and "$82.74" in text_of(pdf)


def test_lines_wrap_between_words_and_anywhere_in_japanese() -> None:
    english = "Remaining time on Pro after 15 Nov 2025"
    lines = wrap(english, 10, 80)
    assert len(lines) > 1 and " ".join(lines) == english
    assert all(width(line, 10) <= 80 for line in lines)
    lines = wrap(
        "クレジット残高から$4.00を充当し、残りの$82.74をお支払い方法に請求しました。", 10, 120
    )
    assert (
        "".join(lines)
        == "クレジット残高から$4.00を充当し、残りの$82.74をお支払い方法に請求しました。"
    )
    assert all(width(line, 10) <= 120 for line in lines)
    assert all("$82." not in line or "$82.74" in line for line in lines)  # amounts stay whole


def test_no_japanese_line_starts_with_a_full_stop_or_a_closing_bracket() -> None:
    """Kinsoku: full stops and closing brackets stay with what they close, opening
    brackets with what they open."""
    text = (
        "$20.00が一部返金されました。"
        "ご返金は、お支払いに使用されたVisa（末尾 4242）に戻されます。"  # noqa: RUF001
    )
    for room in range(60, 400, 2):
        lines = wrap(text, 10, room)
        assert "".join(lines).replace(" ", "") == text.replace(" ", "")
        assert not any(line.startswith(("。", "、", "）")) for line in lines), lines  # noqa: RUF001
        assert not any(line.endswith("（") for line in lines), lines  # noqa: RUF001


@pytest.mark.parametrize(
    ("number", "invoice_id", "filename"),
    [
        ("SAMPLE-0001", "in_1A", "receipt-SAMPLE-0001.pdf"),
        ("INV/2025 #7", "in_1A", "receipt-INV-2025--7.pdf"),
        ("請求書-1", "in_1A", "receipt-----1.pdf"),
        ("", "in_1Abc", "receipt-in_1Abc.pdf"),
        (None, "in_1Abc", "receipt-in_1Abc.pdf"),
    ],
)
def test_the_attachment_is_named_after_the_invoice(
    number: str | None, invoice_id: str, filename: str
) -> None:
    assert attachment_filename(number, invoice_id) == filename
    assert FILENAME.fullmatch(filename)


def test_an_attachment_past_the_bound_is_refused() -> None:
    assert len(attachment(b"x" * (MAX_ATTACHMENT_BASE64 // 4 * 3), "N", "in_1")["content"]) == (
        MAX_ATTACHMENT_BASE64
    )
    with pytest.raises(ReceiptPdfTooLarge):
        attachment(b"x" * (MAX_ATTACHMENT_BASE64 // 4 * 3 + 1), "N", "in_1")


def test_the_payload_carries_the_pdf_only_when_asked() -> None:
    """RECEIPTS_ATTACH_PDF: one attachment in Resend's shape; without it, none."""
    invoice = stripe_events.invoice(id="in_1Pdf", number="ABC-123")
    job = derive_receipt(parse_event(stripe_events.event(invoice)), email_from="b@example.com")
    assert isinstance(job, ReceiptJob)
    payload = render_payload(job.message_key, job.render_input, RENDERER)
    [attached] = payload["attachments"]
    assert attached["filename"] == "receipt-ABC-123.pdf"
    assert attached["content_type"] == "application/pdf"
    pdf = base64.b64decode(attached["content"], validate=True)
    assert "ABC-123" in text_of(pdf)
    assert render_payload(job.message_key, job.render_input, RENDERER) == payload
    plain = render_payload(
        job.message_key, job.render_input, Renderer(support_email="support@example.com")
    )
    assert "attachments" not in plain
    assert {key: value for key, value in payload.items() if key != "attachments"} == plain


def test_unreadable_fonts_stop_the_start_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RECEIPTS_ATTACH_PDF reads the fonts when the renderer is built (worker start-up)."""

    def missing() -> None:
        raise FileNotFoundError("NotoSansJP-Regular.ttf")

    monkeypatch.setattr("receipts.receipt.rendering.registered", missing)
    with pytest.raises(ConfigError, match="RECEIPTS_ATTACH_PDF"):
        Renderer(attach_pdf=True)
    Renderer()  # without the setting nothing is read
