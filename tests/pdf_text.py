"""A PDF read back as text by poppler's ``pdftotext``, to compare with what the email says.

A glyph the fonts lack, or a string drawn in the wrong font, would not come
back as the same characters.
"""

from __future__ import annotations

import subprocess

_SPACES = str.maketrans({"\u202f": " ", "\u00a0": " ", "\u2060": None})


def text_of(pdf: bytes) -> str:
    """What pdftotext reads in ``pdf``, every run of spaces as one space."""
    found = subprocess.run(
        ["pdftotext", "-layout", "-enc", "UTF-8", "-", "-"],
        input=pdf,
        capture_output=True,
        check=True,
    ).stdout.decode("utf-8")
    return shown(found)


def shown(text: str) -> str:
    """``text`` as pdftotext gives it back: no-break spaces as spaces, one space per run,
    no word joiners."""
    return " ".join(text.translate(_SPACES).split())
