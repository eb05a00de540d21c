"""The message key: one per email, ever (docs/architecture.md, "The message key").

A key is ``{account}/{live|test}/{invoice id}/{purpose}``: ``account`` is
``platform`` or the Connect account's ``acct_…`` id, and the purpose says
which email of the invoice it is. An operator's deliberate second email of a
key is that key with ``/resend-<n>`` after it. The key is the outbox's primary
key and Resend's Idempotency-Key, so it is at most 256 characters.

The provider tag (:func:`provider_tag`) is the key as Resend's tags allow it;
:func:`invoice_id_in_tag` reads one back. The SQL that derives a key or a tag
(``ingest.sql: receipts_for_tag``, the row policies of
``sql/roles/least_privilege.sql``) writes the same rules, and
``tests/unit/test_message_keys.py`` proves the two agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_KEY_LENGTH = 256  # Resend's limit for an Idempotency-Key

INVOICE_PAID = "invoice-paid"  # the receipt of a paid invoice
COPY_SUFFIX = "-copy"  # a purpose's copy for the books (RECEIPTS_COPY_TO)
REFUND_PREFIX = "refund-"  # refund-{refund id}
CREDIT_NOTE_PREFIX = "credit-note-"  # credit-note-{credit note id}
RESEND_SEPARATOR = "/resend-"

_ID = r"[A-Za-z0-9_]{1,200}"
_PURPOSE = rf"(?:{INVOICE_PAID}|{REFUND_PREFIX}{_ID}|{CREDIT_NOTE_PREFIX}{_ID})(?:{COPY_SUFFIX})?"
_KEY = re.compile(
    rf"(?P<account>platform|acct_{_ID})/(?P<mode>live|test)/(?P<invoice_id>in_{_ID})"
    rf"/(?P<purpose>{_PURPOSE})(?:{RESEND_SEPARATOR}(?P<resend>[1-9][0-9]{{0,5}}))?"
)
_TAG_REFUSES = re.compile(r"[^A-Za-z0-9_-]")
# In a tag the slashes are underscores; an invoice id holds no '-' and every
# purpose does, so the id ends at the '_' before the purpose's first word.
_INVOICE_IN_TAG = re.compile(
    r"(?:^|_)(?:live|test)_(?P<invoice_id>in_[A-Za-z0-9_]+?)_(?=invoice-|refund-|credit-note-)"
)


class InvalidMessageKey(ValueError):
    """Text that is not a message key, or parts that would not make one."""


@dataclass(frozen=True, kw_only=True)
class MessageKey:
    """A message key read into its parts."""

    account: str
    livemode: bool
    invoice_id: str
    purpose: str
    resend: int | None = None  # n of ``/resend-<n>``

    @property
    def original(self) -> str:
        """The key this one resends, or itself when it is no resend."""
        return message_key(self.account, self.livemode, self.invoice_id, self.purpose)

    def __str__(self) -> str:
        if self.resend is None:
            return self.original
        return resend_key(self.original, self.resend)


def message_key(account: str, livemode: bool, invoice_id: str, purpose: str = INVOICE_PAID) -> str:
    """``{account}/{live|test}/{invoice id}/{purpose}``; InvalidMessageKey past 256 characters."""
    key = "/".join((account, "live" if livemode else "test", invoice_id, purpose))
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidMessageKey(f"message key would exceed {MAX_KEY_LENGTH} characters")
    return key


def refund_purpose(refund_id: str) -> str:
    return REFUND_PREFIX + refund_id


def credit_note_purpose(credit_note_id: str) -> str:
    return CREDIT_NOTE_PREFIX + credit_note_id


def copy_purpose(purpose: str) -> str:
    """The purpose of the copy for the books of an email with this purpose."""
    return purpose + COPY_SUFFIX


def describe_purpose(purpose: str) -> str:
    """Which email of the invoice a purpose is, as support reads it.

    ``Receipt``, ``Refund receipt re_…``, ``Credit note cn_…``, each with
    `` (accounting copy)`` for its copy for the books; an unknown purpose as is.
    """
    copy = purpose.endswith(COPY_SUFFIX)
    own = purpose.removesuffix(COPY_SUFFIX) if copy else purpose
    if own == INVOICE_PAID:
        label = "Receipt"
    elif own.startswith(REFUND_PREFIX):
        label = f"Refund receipt {own.removeprefix(REFUND_PREFIX)}"
    elif own.startswith(CREDIT_NOTE_PREFIX):
        label = f"Credit note {own.removeprefix(CREDIT_NOTE_PREFIX)}"
    else:
        return purpose
    return f"{label} (accounting copy)" if copy else label


def resend_key(original: str, number: int) -> str:
    """``<original>/resend-<n>``; InvalidMessageKey past 256 characters."""
    key = f"{resend_prefix(original)}{number}"
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidMessageKey(f"the resend key would exceed {MAX_KEY_LENGTH} characters")
    return key


def resend_prefix(original: str) -> str:
    """What every resend key of ``original`` starts with."""
    return original + RESEND_SEPARATOR


def parse_message_key(text: str) -> MessageKey:
    """The parts of a message key; InvalidMessageKey if ``text`` is not one."""
    found = _KEY.fullmatch(text) if len(text) <= MAX_KEY_LENGTH else None
    if found is None:
        raise InvalidMessageKey("not a message key (like platform/live/in_…/invoice-paid)")
    resend = found["resend"]
    return MessageKey(
        account=found["account"],
        livemode=found["mode"] == "live",
        invoice_id=found["invoice_id"],
        purpose=found["purpose"],
        resend=int(resend) if resend else None,
    )


def looks_like_message_key(text: str) -> bool:
    """Whether an operator typed a key rather than an invoice, email or id: keys have slashes."""
    return "/" in text


def provider_tag(key: str) -> str:
    """The key as a Resend tag value: ASCII letters, digits, '_' and '-', 256 at most."""
    return _TAG_REFUSES.sub("_", key)[:MAX_KEY_LENGTH]


def invoice_id_in_tag(tag: str | None) -> str | None:
    """The invoice id a provider tag carries, or None when it carries none.

    Keys map to tags many-to-one, so a caller compares ``provider_tag`` of each
    key of that invoice with the tag before it trusts a match.
    """
    found = _INVOICE_IN_TAG.search(tag or "")
    return found["invoice_id"] if found else None
