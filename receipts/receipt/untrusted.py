"""Links and display text that come from the customer's side of an invoice.

Stripe signs the event, but the customer's name, the invoice number and
descriptions are typed by people, and a receipt goes out from the merchant's
domain. Two rules keep them from changing what the receipt says:

* :func:`is_stripe_hosted_url`: a link is used only when every parser, the
  standard library's and a browser's (the WHATWG URL standard), reads the same
  host from it, and that host is exactly one of Stripe's. Python's
  ``urlsplit`` reads ``https://evil.example\\@invoice.stripe.com/`` as a link
  to invoice.stripe.com; a browser turns the backslash into a slash and opens
  evil.example. So: printable ASCII only (browsers drop tabs and newlines and
  trim spaces), no backslash, no user info, no port, the host spelled exactly.
* :func:`one_line`: a display field is one line without bidirectional controls
  or invisible characters: a newline in a customer name must not start its own
  paragraph in the text part ("URGENT: ... https://evil.example/refund"), and a
  right-to-left override must not reorder the subject.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection
from urllib.parse import urlsplit

MAX_URL_LENGTH = 2048
ELLIPSIS = "…"

_HTTPS = "https://"
# Printable ASCII without space: anything else a browser drops, trims or rewrites.
_URL_CHARACTERS = re.compile(r"[!-~]+")
# Zero-width joiner and non-joiner: format characters that Persian, Indic
# scripts and emoji sequences need; every other format character goes.
_KEPT_FORMAT_CHARACTERS = frozenset("\u200c\u200d")
_SPACES = re.compile(r" {2,}")


def is_stripe_hosted_url(value: object, hosts: Collection[str]) -> bool:
    """Whether ``value`` is ``https://HOST/...`` with HOST exactly one of ``hosts``.

    Refused: anything but printable ASCII (whitespace and control characters
    included), a backslash, user info, a port, another spelling of the host
    (case, trailing dot, percent-encoding), no path, or over 2048 characters.
    """
    if not isinstance(value, str) or len(value) > MAX_URL_LENGTH:
        return False
    if not _URL_CHARACTERS.fullmatch(value) or "\\" in value or not value.startswith(_HTTPS):
        return False
    # Without backslashes a browser's authority ends at the first '/', '?' or '#';
    # compared whole, it can hold none of '@', ':', '?', '#' or '%'.
    authority, slash, _path = value[len(_HTTPS) :].partition("/")
    if not slash or authority not in hosts:
        return False
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return False
    # The standard library must read the same host (belt and braces).
    return parts.hostname == authority and parts.username is None and port is None


def one_line(value: object, limit: int = 200) -> str | None:
    """``value`` as one line of at most ``limit`` characters; None if empty or not text.

    Line breaks, tabs and every other kind of space become one space; other
    control characters, bidirectional controls, invisible format characters
    (zero-width space, byte-order mark, tag characters) and lone surrogates are
    removed. Letters of every script, and the joiners they need, stay.
    """
    if not isinstance(value, str):
        return None
    if len(value) <= limit and value.isprintable() and "  " not in value:
        return value.strip() or None  # the common case: nothing to clean
    # Only a bounded prefix can survive, so only that much is cleaned.
    text = "".join(_safe(character) for character in value[: limit * 8])
    text = _SPACES.sub(" ", text).strip()
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + ELLIPSIS
    return text or None


def _safe(character: str) -> str:
    """One character as it may be shown: itself, one space, or nothing."""
    if character.isprintable():
        return character
    if character.isspace():
        return " "
    if character in _KEPT_FORMAT_CHARACTERS:
        return character
    if unicodedata.category(character) in ("Cc", "Cf", "Cs"):
        return ""
    return character  # unassigned or private use: shown as the font can
