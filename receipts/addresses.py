"""The one check of what counts as an email address, for customers, senders and operators."""

from __future__ import annotations

import re

MAX_ADDRESS_LENGTH = 320  # RFC 5321: 64 for the local part, @, 255 for the domain

_ADDRESS = re.compile(
    r"[^@\s<>,;\x00-\x1f\x7f]+@[^@\s<>,;\x00-\x1f\x7f]+\.[^@\s<>,;\x00-\x1f\x7f]+"
)
_NAMED_ADDRESS = re.compile(r"[^<>]*<([^<>]+)>")


def is_email_address(text: str) -> bool:
    """A bare address (``a@b.example``): one @, a dotted domain, no spaces or separators."""
    return len(text) <= MAX_ADDRESS_LENGTH and _ADDRESS.fullmatch(text) is not None


def mailbox_address(text: str) -> str | None:
    """The address of ``a@b.example`` or ``Name <a@b.example>``; None if it is neither."""
    named = _NAMED_ADDRESS.fullmatch(text)
    bare = named.group(1).strip() if named else text
    return bare if is_email_address(bare) else None
