"""The message key grammar: built, read back, and tagged the same way everywhere.

docs/architecture.md, "The message key". The SQL that derives keys and tags
is proved equal to these functions in tests/db/test_message_key_sql.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from receipts.message_keys import (
    MAX_KEY_LENGTH,
    InvalidMessageKey,
    MessageKey,
    copy_purpose,
    credit_note_purpose,
    describe_purpose,
    invoice_id_in_tag,
    message_key,
    parse_message_key,
    provider_tag,
    refund_purpose,
    resend_key,
)

ids = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_",
    min_size=1,
    max_size=30,
)
accounts = st.just("platform") | ids.map(lambda tail: f"acct_{tail}")
purposes = (
    st.sampled_from(["invoice-paid"]) | ids.map(refund_purpose) | ids.map(credit_note_purpose)
)
keys = st.builds(
    MessageKey,
    account=accounts,
    livemode=st.booleans(),
    invoice_id=ids.map(lambda tail: f"in_{tail}"),
    purpose=st.one_of(purposes, purposes.map(copy_purpose)),
    resend=st.none() | st.integers(min_value=1, max_value=99),
)


@given(keys)
def test_a_key_reads_back_into_its_parts(parts: MessageKey) -> None:
    """Every key the product writes, resends and copies included, parses to what made it."""
    assert parse_message_key(str(parts)) == parts


@given(keys)
def test_the_provider_tag_carries_the_invoice_id(parts: MessageKey) -> None:
    """A tag is the key as Resend allows it; the invoice id is read back whole, even
    when ids hold underscores and the account is a Connect account."""
    tag = provider_tag(str(parts))
    assert set(tag) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
    assert invoice_id_in_tag(tag) == parts.invoice_id


def test_the_key_of_a_paid_invoice() -> None:
    assert message_key("acct_1X", True, "in_1Y") == "acct_1X/live/in_1Y/invoice-paid"
    assert provider_tag("acct_1X/live/in_1Y/invoice-paid") == "acct_1X_live_in_1Y_invoice-paid"
    assert (
        resend_key("platform/test/in_1/invoice-paid", 2)
        == "platform/test/in_1/invoice-paid/resend-2"
    )


def test_a_key_longer_than_the_idempotency_key_limit_is_refused() -> None:
    with pytest.raises(InvalidMessageKey):
        message_key("platform", True, "in_" + "x" * MAX_KEY_LENGTH)
    with pytest.raises(InvalidMessageKey):
        resend_key("platform/live/in_" + "x" * 229 + "/invoice-paid", 1)


@pytest.mark.parametrize(
    "text",
    [
        "platform/live/in_1/invoice-paid\n",
        "platform/live/in_1/invoice-paid/resend-0",
        "platform/staging/in_1/invoice-paid",
        "acct_/live/in_1/invoice-paid",
        "platform/live/ch_1/invoice-paid",
        "platform/live/in_1/something-else",
        "in_1",
    ],
)
def test_what_is_not_a_key_is_refused(text: str) -> None:
    with pytest.raises(InvalidMessageKey):
        parse_message_key(text)


@pytest.mark.parametrize("tag", [None, "", "no-invoice-here", "platform_live_ch_1_invoice-paid"])
def test_a_tag_without_an_invoice_id_reads_as_none(tag: str | None) -> None:
    assert invoice_id_in_tag(tag) is None


def test_each_purpose_reads_as_the_email_it_is() -> None:
    assert [
        describe_purpose(purpose)
        for purpose in (
            "invoice-paid",
            "invoice-paid-copy",
            "refund-re_1Abc",
            "refund-re_1Abc-copy",
            "credit-note-cn_1Abc",
            "something-else",
        )
    ] == [
        "Receipt",
        "Receipt (accounting copy)",
        "Refund receipt re_1Abc",
        "Refund receipt re_1Abc (accounting copy)",
        "Credit note cn_1Abc",
        "something-else",
    ]
