"""Text from the payload made safe to show: one line, no controls, bounded.

Customer names, line descriptions and coupon names are typed by people (the
merchant, and sometimes the customer). In a receipt sent from the merchant's
domain none of them may start a new line or paragraph, reorder the text
around it (bidirectional overrides) or hide characters (zero-width marks).
"""

from __future__ import annotations

import re

# C0 and C1 controls (newlines and tabs included), DEL, line and paragraph
# separators, bidirectional embeddings/overrides/isolates and marks, zero-width
# space and BOM, and lone surrogates (which no mail or database encoding takes).
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028-\u202e\u2066-\u2069\ufeff\ud800-\udfff]"
)
_SPACES = re.compile(r"\s+")
ELLIPSIS = "…"


def one_line(value: object, limit: int = 200) -> str | None:
    """``value`` as one clean line of at most ``limit`` characters; None if empty or not text."""
    if not isinstance(value, str):
        return None
    # Most values are clean already; str.isprintable is false for every
    # control, separator and format character the expression below removes.
    if len(value) <= limit and value.isprintable() and "  " not in value:
        return value.strip() or None
    # Only a bounded prefix can survive, so only that much is cleaned.
    text = _SPACES.sub(" ", _UNSAFE.sub(" ", value[: limit * 8])).strip()
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + ELLIPSIS
    return text or None
