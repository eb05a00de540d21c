"""The one place for address rules: customers, senders, reply-to and the ``.eml`` sink.

Addresses are read and written with the standard library's
``email.headerregistry``, so what is checked is exactly what a mail header
will say. On top of what that parser allows, an address here must be plain:

* a bare address (:func:`parse_address`) is an ASCII dot-atom local part, ``@``
  and a dotted host name; no quoted local parts, no domain literals
  (``[1.2.3.4]``), no RFC 2047 encoded words (``=?utf-8?q?...?=`` would be
  decoded into other characters, a comma included, by a header parser), no
  spaces or control characters, and it must read back exactly as written;
* a mailbox (:func:`parse_mailbox`) is one such address, optionally with a
  display name: ``Name <a@b.example>``; one line, one address, a display name
  with a comma or parentheses quoted (``"Acme, Inc" <a@b.example>``).

Anything else raises :class:`AddressError` (a ``ValueError``) whose message
says what is wrong in a few words, never a parser's traceback: the standard
parser itself raises ``AttributeError`` on some inputs (``a@[b.com``).
"""

from __future__ import annotations

import re
from email.errors import ObsoleteHeaderDefect
from email.headerregistry import Address
from email.policy import default as _DEFAULT_POLICY

MAX_ADDRESS_LENGTH = 320  # RFC 5321: 64 for the local part, @, 255 for the domain
MAX_MAILBOX_LENGTH = 998  # RFC 5322: the longest line a header may have

_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LOCAL_PART = re.compile(rf"{_ATEXT}(?:\.{_ATEXT})*")
# A host name label: letters, digits, hyphens (not at either end); non-ASCII
# letters are allowed for internationalised domain names.
_LABEL = re.compile(r"(?!-)[A-Za-z0-9\-\u0080-\U0010ffff]{1,63}(?<!-)")
_QUOTED_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
# The common shape, all ASCII: a dot-atom, @, dotted labels. The standard parser
# reads every such address back as written (tests/unit/test_addresses.py checks
# it on generated ones), so it is taken without the parser's cost; anything
# else goes through the parser.
_ASCII_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
PLAIN_ASCII_ADDRESS = re.compile(
    rf"(?P<local>{_ATEXT}(?:\.{_ATEXT})*)@(?P<domain>{_ASCII_LABEL}(?:\.{_ASCII_LABEL})+)"
)


class AddressError(ValueError):
    """Not a usable address; the message says why in a few words."""


def parse_address(text: str) -> Address:
    """The bare address ``a@b.example`` as an :class:`Address`; AddressError if it is not one."""
    if not isinstance(text, str) or not text:
        raise AddressError("is empty")
    if len(text) > MAX_ADDRESS_LENGTH:
        raise AddressError(f"is longer than {MAX_ADDRESS_LENGTH} characters")
    plain = PLAIN_ASCII_ADDRESS.fullmatch(text)
    if plain is not None and "=?" not in text and len(plain["domain"]) <= 255:
        return Address(username=plain["local"], domain=plain["domain"])
    return parsed_address(text)


def parsed_address(text: str) -> Address:
    """:func:`parse_address` without the shortcut: always the standard parser."""
    if not text.isprintable() or any(character.isspace() for character in text):
        raise AddressError("contains spaces or control characters")
    try:
        address = Address(addr_spec=text)
    except Exception:  # the parser raises more than ValueError on some inputs
        raise AddressError("is not an email address") from None
    _check_plain(address)
    if address.addr_spec != text:
        raise AddressError("does not read back as written")
    return address


def _check_plain(address: Address) -> None:
    """An ASCII dot-atom local part without encoded words, and a dotted host name."""
    if not _LOCAL_PART.fullmatch(address.username) or "=?" in address.username:
        raise AddressError("has an unusual local part (before the @)")
    labels = address.domain.split(".")
    if (
        len(labels) < 2
        or len(address.domain) > 255
        or not all(_LABEL.fullmatch(label) for label in labels)
    ):
        raise AddressError("has no usable domain (after the @)")


def is_email_address(text: str) -> bool:
    """Whether ``text`` is a bare address, as :func:`parse_address` reads it."""
    try:
        parse_address(text)
    except AddressError:
        return False
    return True


def parse_mailbox(text: str) -> Address:
    """``a@b.example`` or ``Name <a@b.example>`` as one :class:`Address`.

    AddressError if it is not exactly one plain address on one line; an
    unquoted comma in a display name makes two addresses, and is refused.
    """
    if not isinstance(text, str) or not text.strip():
        raise AddressError("is empty")
    if "\r" in text or "\n" in text:
        raise AddressError("must be one line (it contains a line break)")
    if len(text) > MAX_MAILBOX_LENGTH or not text.isprintable():
        raise AddressError("is too long or contains control characters")
    if "(" in _QUOTED_STRING.sub("", text):
        # A parser drops a comment: 'Acme (Billing) <a@b>' would be written 'Acme <a@b>'.
        raise AddressError(
            'has a comment in parentheses (quote the display name: "Acme (Billing)" <a@b.example>)'
        )
    try:
        header = _DEFAULT_POLICY.header_factory("From", text)
        addresses = header.addresses
        groups = header.groups
    except Exception:  # the parser raises more than ValueError on some inputs
        raise AddressError("is not an email address") from None
    if len(addresses) != 1 or len(groups) != 1 or groups[0].display_name is not None:
        raise AddressError(
            "must name exactly one address (quote a display name that has a comma: "
            '"Acme, Inc" <billing@acme.example>)'
        )
    # An obsolete form (a period in an unquoted name) reads fine and is written quoted.
    if any(not isinstance(defect, ObsoleteHeaderDefect) for defect in header.defects):
        raise AddressError("is not an email address")
    [address] = addresses
    parse_address(address.addr_spec)
    return Address(display_name=address.display_name, addr_spec=address.addr_spec)


def mailbox_address(text: str) -> str | None:
    """The bare address of ``a@b.example`` or ``Name <a@b.example>``; None if neither."""
    try:
        return parse_mailbox(text).addr_spec
    except AddressError:
        return None


def formatted_mailbox(text: str) -> str:
    """The mailbox as a header writes it (a name with a comma or period quoted)."""
    return str(parse_mailbox(text))
