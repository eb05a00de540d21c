"""The PDF receipt's fonts: Noto Sans for Latin, Greek and Cyrillic, Noto Sans JP for the rest.

Both are TrueType fonts under the SIL Open Font License 1.1, embedded as
subsets of the characters a receipt uses. Noto Sans comes from the
``fontpkg-noto-sans`` package; Noto Sans JP (kana, every kanji of JIS X 0208
and 0213 the font has, full-width forms) ships in ``receipts/receipt/fonts``
with TrueType outlines (``bench/pdf_font.py`` made it, and says why). Each
character of a text is set in the first of the two that has it; a character
neither has (Hangul, Arabic, Thai…) shows as an empty box.

The fonts are read once per process (about 60 ms); after that a receipt's
PDF costs a few milliseconds (``python -m bench.pdf``).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache, lru_cache
from pathlib import Path

import fontpkg_noto_sans
from reportlab import rl_config
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont

FONTS_DIR = Path(__file__).with_name("fonts")
JAPANESE_FONT = FONTS_DIR / "NotoSansJP-Regular.ttf"
LATIN = "ReceiptsNotoSans"
JAPANESE = "ReceiptsNotoSansJP"
# Never drawn: joiners and marks that only steer line breaking in HTML.
_INVISIBLE = str.maketrans("", "", "\u2060\u200b\ufeff")


def latin_font_file() -> Path:
    """Noto Sans (a variable font; its default instance is the Regular weight)."""
    return Path(fontpkg_noto_sans.ROOT) / "files" / "NotoSans[wdth,wght].ttf"


# Streams are compressed only, not also ASCII85-encoded: smaller, and a third cheaper to write.
rl_config.useA85 = 0


@cache
def registered() -> tuple[frozenset[int], frozenset[int]]:
    """Register both fonts with ReportLab once; the characters each one has."""
    covered = []
    for name, path in ((LATIN, latin_font_file()), (JAPANESE, JAPANESE_FONT)):
        font = TTFont(name, str(path))
        pdfmetrics.registerFont(font)
        covered.append(frozenset(font.face.charToGlyph))
    return covered[0], covered[1]


def runs(text: str) -> Iterator[tuple[str, str]]:
    """``(font name, text)`` pieces of ``text``, each set in one font."""
    latin, japanese = registered()
    text = text.translate(_INVISIBLE)
    start, current = 0, LATIN
    for index, character in enumerate(text):
        code = ord(character)
        font = JAPANESE if code not in latin and code in japanese else LATIN
        if font != current and index > start:
            yield current, text[start:index]
            start = index
        current = font
    if start < len(text):
        yield current, text[start:]


@lru_cache(maxsize=4096)
def width(text: str, size: float) -> float:
    """How wide ``text`` is at ``size`` points."""
    return float(sum(pdfmetrics.stringWidth(piece, font, size) for font, piece in runs(text)))
