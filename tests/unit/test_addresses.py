"""The one address check: what ingest, the settings and the .eml sink accept."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from receipts.addresses import (
    MAX_ADDRESS_LENGTH,
    PLAIN_ASCII_ADDRESS,
    AddressError,
    formatted_mailbox,
    is_email_address,
    mailbox_address,
    parse_address,
    parse_mailbox,
    parsed_address,
)
from tests.helpers import examples

ENCODED_WORD = "=?utf-8?q?evil=40evil.example=2C?=@example.com"


@pytest.mark.parametrize(
    "text",
    ["jenny.rosen@example.com", "a+tag@sub.example.co.uk", "o'neil@example.com", "a@exämple.de"],
)
def test_plain_addresses_are_accepted(text: str) -> None:
    """Ordinary addresses, tags, apostrophes and internationalised domains pass."""
    assert is_email_address(text)


@pytest.mark.parametrize(
    "text",
    [
        ENCODED_WORD,  # a header parser decodes it into 'evil@evil.example,'
        "a@[b.com",  # the standard parser raises AttributeError on this one
        "a@[127.0.0.1]",  # domain literals
        '"a b"@example.com',
        '"ab"@example.com',
        "a..b@example.com",
        "jörg@example.com",  # non-ASCII local part: not in a plain header
        "a@b",
        "a@-b.example",
        "a@b.example.",
        "a b@example.com",
        "a@example.com\n",
        "a@exam\u202eple.com",
        "a@example.com, b@example.com",
        "Name <a@example.com>",
        "x" * 310 + "@example.com",
    ],
)
def test_addresses_a_header_would_read_otherwise_are_refused(text: str) -> None:
    """Anything that is not one plain address, read back exactly as written, is refused
    without an exception other than a False answer."""
    assert not is_email_address(text)


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ("billing@example.com", "billing@example.com"),
        ("Billing <billing@example.com>", "Billing <billing@example.com>"),
        ('"Acme, Inc" <billing@example.com>', '"Acme, Inc" <billing@example.com>'),
        ("Acme Inc. <billing@example.com>", '"Acme Inc." <billing@example.com>'),
        ("Café <billing@example.com>", "Café <billing@example.com>"),
        ('"Acme (Billing)" <billing@example.com>', '"Acme (Billing)" <billing@example.com>'),
    ],
)
def test_a_mailbox_is_written_as_a_header_would_write_it(text: str, written: str) -> None:
    """A sender with a display name is kept, quoted where a header needs quotes."""
    assert formatted_mailbox(text) == written
    assert mailbox_address(text) == "billing@example.com"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("Acme, Inc <billing@example.com>", "quote a display name"),
        ("Acme (Billing) <billing@example.com>", "comment in parentheses"),
        ("billing@example.com (Acme)", "comment in parentheses"),
        ("Billing <billing@example.com>\r\nBcc: all@example.com", "one line"),
        ("billing@example.com\n", "one line"),
        ("a@example.com, b@example.com", "exactly one address"),
        ("Team: a@example.com;", "exactly one address"),
        ("Billing <a@[b.com>", "not an email address"),
        (f"Billing <{ENCODED_WORD}>", "not an email address"),
        ("billing", "not an email address"),
        ("", "empty"),
    ],
)
def test_a_mailbox_that_is_not_exactly_one_address_on_one_line_is_refused(
    text: str, problem: str
) -> None:
    """Refusals say why in a few words on one line, never with a parser's traceback."""
    with pytest.raises(AddressError) as raised:
        parse_mailbox(text)
    assert problem in str(raised.value) and "\n" not in str(raised.value)
    assert mailbox_address(text) is None


@settings(max_examples=examples(100), deadline=None)
@given(
    st.from_regex(PLAIN_ASCII_ADDRESS, fullmatch=True).filter(
        lambda text: len(text) <= MAX_ADDRESS_LENGTH
    )
)
def test_the_plain_ascii_shortcut_agrees_with_the_standard_parser(text: str) -> None:
    """Every address the shortcut takes, the standard parser takes too, reading it back
    as written and splitting it the same way; the shortcut never refuses one either."""
    try:
        expected = parsed_address(text)
    except AddressError:
        with pytest.raises(AddressError):
            parse_address(text)
        return
    found = parse_address(text)
    assert (found.username, found.domain, found.addr_spec) == (
        expected.username,
        expected.domain,
        text,
    )


def test_the_shortcut_leaves_encoded_words_and_long_addresses_to_the_checks() -> None:
    """'=?' in a plain-looking local part and an over-long address are still refused."""
    with pytest.raises(AddressError):
        parse_address("=?utf-8?q?x?=@example.com")
    with pytest.raises(AddressError):
        parse_address("a" * MAX_ADDRESS_LENGTH + "@example.com")
