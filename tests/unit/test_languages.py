"""Every example in every shipped language: no English left but names and numbers.

Receipts (``examples/*.json``) and refund and credit note emails
(``examples/render_input/*.json``) alike.

The check takes each rendered part, removes every value that comes from the
invoice or from Babel's locale data (names, descriptions, amounts, dates,
links, country names), then every piece of that language's own catalog. What
remains must hold no letter at all: any word left is text the catalog did not
translate.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from typing import Any

import pytest
from babel.messages.pofile import read_po

from receipts.receipt.after_payment import read_credit_note, read_refund
from receipts.receipt.after_payment_views import present_credit_note, present_refund
from receipts.receipt.api_facts import api_facts_from_document
from receipts.receipt.catalogs import (
    LANGUAGES,
    SOURCE_LANGUAGE,
    catalog_path,
    load_catalogs,
    parse_locale,
)
from receipts.receipt.invoice_facts import read_invoice
from receipts.receipt.payload import render_payload
from receipts.receipt.presentation import TAX_ID_NAMES, Contact, present
from receipts.receipt.rendering import ascii_spaces
from tests.receipt_examples import (
    EXAMPLES,
    VISA,
    email,
    example,
    example_names,
    invoice_of,
    renderer,
)

TRANSLATED = [language for language in LANGUAGES if language != SOURCE_LANGUAGE]
PLACEHOLDER = re.compile(r"%\(\w+\)s")
LETTER = re.compile(r"[^\W\d_]+")


def catalog_pieces(language: str) -> list[str]:
    """Every stretch of fixed text in the language's translations, longest first."""
    with catalog_path(language).open("rb") as source:
        catalog = read_po(source, locale=language)
    pieces: set[str] = set()
    for message in catalog:
        if not message.id:
            continue
        strings = (message.string,) if isinstance(message.string, str) else message.string or ()
        for string in strings:
            pieces.update(piece.strip() for piece in PLACEHOLDER.split(string))
    return sorted((piece for piece in pieces if LETTER.search(piece)), key=len, reverse=True)


def dynamic_values(name: str, language: str) -> list[str]:
    """What the receipt takes from the invoice and from Babel, as rendered in ``language``."""
    invoice = invoice_of(name)
    facts = read_invoice(invoice["id"], invoice, None)
    view = present(
        facts,
        locale=parse_locale(language),  # type: ignore[arg-type]
        translations=load_catalogs()[language],
        timezone=renderer(language).timezone,
        payment_method=VISA.payment_method,
    )
    values: list[Any] = [
        facts.merchant,
        facts.number,
        facts.customer_name,
        facts.to,
        facts.hosted_invoice_url,
        facts.invoice_pdf,
        view.paid_at,
        "Visa",
        *view.customer_address,
        *(line.description for line in facts.lines),
        *(line.period for line in view.lines),
        *(line.amount for line in view.lines),
        *(line.quantity for line in view.lines),
        *(discount.name for discount in facts.discounts),
        *(tax.name for tax in facts.taxes),
        *(found.amount for found in (*view.discounts, *view.taxes, *view.included_taxes)),
        *(found.value for found in facts.details.customer_tax_ids),
        *(found.value for found in facts.details.merchant_tax_ids),
        *TAX_ID_NAMES.values(),  # EIN, ABN: the same in every language
        *(text for field in facts.details.custom_fields for text in field),
        facts.details.memo,
        facts.details.footer,
        view.subtotal,
        view.total,
        view.settled,
        view.amount_paid,
        view.credit_applied,
        view.credit_applied_negative,
        view.previous_balance,
        view.shipping,
        view.credit_notes,
    ]
    return sorted({value for value in values if value}, key=len, reverse=True)


class _Text(HTMLParser):
    """The text a reader sees in an HTML part (attributes, such as links, left out)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def visible_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    parser.close()
    return "\n".join(parser.parts)


def without(text: str, values: list[str], pieces: list[str]) -> str:
    # The text part writes CLDR's no-break and thin spaces as plain ones: compare so.
    text = ascii_spaces(text)
    for value in values:
        text = text.replace(ascii_spaces(value), " ")
    for piece in map(ascii_spaces, pieces):
        # Latin words must match whole; Japanese has no spaces between words.
        before = r"(?<!\w)" if piece[0].isascii() and piece[0].isalnum() else ""
        after = r"(?!\w)" if piece[-1].isascii() and piece[-1].isalnum() else ""
        text = re.sub(before + re.escape(piece) + after, " ", text)
    return text


@pytest.mark.parametrize("language", TRANSLATED)
@pytest.mark.parametrize("name", example_names())
def test_no_english_is_left(name: str, language: str) -> None:
    """Subject, text and HTML hold only the language's catalog, names and numbers."""
    payload = email(example(name), renderer(language), api_facts=VISA)
    values = dynamic_values(name, language)
    pieces = catalog_pieces(language)
    for part in ("subject", "text", "html"):
        text = visible_text(payload[part]) if part == "html" else payload[part]
        left = LETTER.findall(without(text, values, pieces))
        assert not left, f"{name} in {language}, {part}: untranslated {left}"


def test_the_check_finds_english_when_a_catalog_misses_a_message() -> None:
    """The test above would fail on an English word: here one is added to a German receipt."""
    payload = email(example("invoice_paid"), renderer("de"), api_facts=VISA)
    values = dynamic_values("invoice_paid", "de")
    leaked = payload["text"].replace("Rechnungsnummer", "Invoice number")
    assert LETTER.findall(without(leaked, values, catalog_pieces("de"))) == ["Invoice", "number"]


RENDER_INPUTS = EXAMPLES / "render_input"


def after_payment_values(render_input: dict[str, Any], language: str) -> list[str]:
    """What a refund or credit note email takes from Stripe and from Babel, in ``language``."""
    locale = parse_locale(language)
    assert locale is not None
    method = api_facts_from_document(render_input.get("api_facts")).payment_method
    options: dict[str, Any] = {
        "locale": locale,
        "translations": load_catalogs()[language],
        "timezone": renderer(language).timezone,
        "payment_method": method,
        "contact": Contact(),
    }
    view: Any
    if render_input["kind"] == "refund":
        view = present_refund(read_refund(render_input), **options)
        values = [view.amount, view.refunded_at]
    else:
        view = present_credit_note(read_credit_note(render_input), **options)
        values = [
            view.number, view.issued_at, view.memo, view.pdf, view.subtotal, view.discount,
            view.shipping, view.total, view.refunded, view.credited, view.out_of_band,
            view.off_invoice, *(line.description for line in view.lines),
            *(line.amount for line in view.lines), *(line.quantity for line in view.lines),
            *(tax.amount for tax in (*view.taxes, *view.included_taxes)),
        ]  # fmt: skip
    invoice = view.invoice
    values += [
        view.merchant, view.customer_name, view.customer_email, invoice.number,
        invoice.paid_at, invoice.amount_paid, invoice.hosted_invoice_url, view.payment_method,
    ]  # fmt: skip
    return sorted({value for value in values if value}, key=len, reverse=True)


@pytest.mark.parametrize("language", TRANSLATED)
@pytest.mark.parametrize("name", sorted(path.stem for path in RENDER_INPUTS.glob("*.json")))
def test_no_english_is_left_in_refunds_and_credit_notes(name: str, language: str) -> None:
    """The refund and credit note emails too: only the catalog, names and numbers."""
    render_input = json.loads((RENDER_INPUTS / f"{name}.json").read_text("utf-8"))
    render_input["api_facts"]["preferred_locales"] = [language]
    payload = render_payload("platform/test/in_1/refund-re_1", render_input, renderer())
    values = after_payment_values(render_input, language)
    pieces = catalog_pieces(language)
    for part in ("subject", "text", "html"):
        text = visible_text(payload[part]) if part == "html" else payload[part]
        left = LETTER.findall(without(text, values, pieces))
        assert not left, f"{name} in {language}, {part}: untranslated {left}"
