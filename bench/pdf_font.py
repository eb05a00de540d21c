"""Make the PDF receipt's font: Noto Sans JP with TrueType outlines.

Run by hand when the font is to be updated (not part of the tests)::

    .venv/bin/pip install pylopdf-fonts-jp
    .venv/bin/python -m bench.pdf_font [receipts/receipt/fonts/NotoSansJP-Regular.ttf]

The Noto Sans JP that PyPI packages carry (pylopdf-fonts-jp, noto-cjk-sans-jp-regular)
has PostScript (CFF) outlines. Subsetting a CFF font of 17,000 glyphs for each receipt
costs 90-170 ms (``python -m bench.pdf``); ReportLab embeds TrueType outlines only, and
subsets them in about a millisecond. So this converts the same font, every glyph of it,
to quadratic outlines (within 1 unit of 1000 per em) once, drops the hinting and
the layout tables a receipt does not use (vertical writing, OpenType features), and
writes a file the same bytes every time. The font's licence (SIL OFL 1.1, no
reserved name) allows the modified font to be shipped under its name; its licence is
``receipts/receipt/fonts/OFL.txt``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fontTools.pens.cu2quPen import Cu2QuPen
from fontTools.pens.ttGlyphPen import TTGlyphPen
from fontTools.subset import Options, Subsetter
from fontTools.ttLib import TTFont, newTable

DEFAULT = Path(__file__).resolve().parent.parent / "receipts/receipt/fonts/NotoSansJP-Regular.ttf"
MAX_ERROR = 1.0  # font units, of 1000 per em
UNUSED_TABLES = ("CFF ", "VORG", "GSUB", "GPOS", "GDEF", "BASE", "vhea", "vmtx", "DSIG")
MAXP_ZEROED = (
    "maxTwilightPoints", "maxStorage", "maxFunctionDefs", "maxInstructionDefs",
    "maxStackElements", "maxSizeOfInstructions", "maxComponentElements",
)  # fmt: skip


def source_font() -> Path:
    """The OpenType (CFF) Noto Sans JP of the pylopdf-fonts-jp package."""
    import pylopdf_fonts_jp  # type: ignore[import-not-found]

    return Path(pylopdf_fonts_jp.sans_path())


def to_truetype(font: TTFont) -> None:
    """Replace the CFF outlines of ``font`` with TrueType ones, in place."""
    order = font.getGlyphOrder()
    glyphs = font.getGlyphSet()
    glyf = newTable("glyf")
    glyf.glyphOrder = order
    glyf.glyphs = {}
    for name in order:
        pen = TTGlyphPen(glyphs)
        glyphs[name].draw(Cu2QuPen(pen, MAX_ERROR, reverse_direction=True))
        glyf[name] = pen.glyph()
    font["loca"] = newTable("loca")
    font["glyf"] = glyf
    maxp = font["maxp"]
    maxp.tableVersion = 0x00010000
    maxp.maxZones = 1
    for field in MAXP_ZEROED:
        setattr(maxp, field, 0)
    font["head"].glyphDataFormat = 0
    font["post"].formatType = 3.0
    for tag in UNUSED_TABLES:
        if tag in font:
            del font[tag]
    font.sfntVersion = "\x00\x01\x00\x00"


def every_glyph_without_hinting(font: TTFont) -> None:
    """Keep every character, drop what a PDF viewer does not need."""
    options = Options()
    options.hinting = False
    options.layout_features = []
    options.name_IDs = ["*"]
    options.name_languages = ["*"]
    options.notdef_outline = True
    options.glyph_names = False
    options.recalc_timestamp = False
    subsetter = Subsetter(options)
    subsetter.populate(unicodes=font.getBestCmap().keys())
    subsetter.subset(font)


def main(argv: list[str]) -> int:
    target = Path(argv[0]) if argv else DEFAULT
    font = TTFont(source_font(), recalcTimestamp=False)
    to_truetype(font)
    every_glyph_without_hinting(font)
    font.save(target)
    print(f"{target}: {target.stat().st_size} bytes, {len(font.getGlyphOrder())} glyphs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
