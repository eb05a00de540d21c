"""PDF receipt cost: milliseconds of CPU per receipt PDF, for each library tried.

Run by hand (not part of the tests)::

    .venv/bin/pip install fpdf2 pylopdf-fonts-jp noto-cjk-sans-jp-regular  # the other candidates
    .venv/bin/python -m bench.pdf [--number 300] [--only reportlab-ttf receipts-ja ...]

Every candidate lays out the same Japanese receipt (about 40 strings: labels, amounts
aligned right, a customer name, tax ids) on one A4 page with an embedded subset of
Noto Sans JP, in one process, ``--number`` times; it prints the median CPU time of one
render, the PDF's size, and whether two renders are the same bytes. ``receipts-*`` is
the product's own renderer (:mod:`receipts.receipt.pdf`) on the sample receipt.
A candidate whose packages are not installed is skipped with a note.

Not tried: WeasyPrint and xhtml2pdf's HTML route need Pango/Cairo or pull in a browser
of dependencies (a Heroku or Render slug has no Pango); borb is AGPL-licensed.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from bench.pdf_font import DEFAULT as TRUETYPE_FONT

Render = Callable[[], bytes]
ROWS = [
    ("領収書番号", "2412-7701"), ("請求書番号", "SAMPLE-0001"), ("支払日", "2025年11月30日 0:00"),
    ("支払方法", "Visa •••• 4242"), ("お客様の税番号", "T1234567890123"),
    ("販売者の税番号", "VAT FR40123456824"), ("請求先", "山田 太郎 様"),
    ("", "東京都千代田区丸の内1-1-1"), ("Pro プラン \u00d7 2", "¥9,800"),
    ("2025年11月30日\uff5e2025年12月30日", ""), ("Starter の未使用期間", "-¥967"),
    ("小計", "¥9,333"), ("ローンチ (20%オフ)", "-¥1,867"), ("消費税 (10%)", "¥747"),
    ("送料", "¥500"), ("合計", "¥8,713"), ("クレジット残高から", "-¥400"),
    ("お支払い金額", "¥8,313"), ("うち消費税 (8%)", "¥55"),
    ("このレシートについてのご質問は support@example.com までご連絡ください。", ""),
]  # fmt: skip


def fpdf2(font: Path | str) -> Render:
    from fpdf import FPDF  # type: ignore[import-not-found]

    def render() -> bytes:
        pdf = FPDF()
        pdf.set_creation_date(datetime(2025, 11, 30, tzinfo=UTC))
        pdf.add_font("Noto", fname=str(font))
        pdf.add_page()
        pdf.set_font("Noto", size=10)
        pdf.cell(0, 10, "株式会社サンプル 領収書", new_x="LMARGIN", new_y="NEXT")
        for label, value in ROWS:
            pdf.cell(120, 6, label)
            pdf.cell(0, 6, value, align="R", new_x="LMARGIN", new_y="NEXT")
        return bytes(pdf.output())

    return render


def reportlab(font: Path) -> Render:
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont
    from reportlab.pdfgen.canvas import Canvas

    pdfmetrics.registerFont(TTFont("Noto", str(font)))  # once per process

    def render() -> bytes:
        out = io.BytesIO()
        page = Canvas(out, invariant=True)
        page.setFont("Noto", 14)
        page.drawString(57, 780, "株式会社サンプル 領収書")
        page.setFont("Noto", 10)
        y = 750.0
        for label, value in ROWS:
            page.drawString(57, y, label)
            page.drawRightString(538, y, value)
            y -= 17
        page.showPage()
        page.save()
        return out.getvalue()

    return render


def receipts(locale: str) -> Render:
    from receipts.receipt.pdf import receipt_pdf
    from receipts.receipt.pdf_fonts import width
    from receipts.receipt.rendering import Renderer
    from receipts.receipt.samples import SAMPLE_PAYMENT_METHOD, sample_receipts

    renderer = Renderer(locale=locale, support_email="support@example.com")
    facts = sample_receipts()[0]

    def render() -> bytes:
        width.cache_clear()  # each receipt measures its own strings afresh
        return receipt_pdf(renderer, facts, payment_method=SAMPLE_PAYMENT_METHOD)

    return render


def package_font(module: str, attribute: str) -> Callable[[], Path]:
    def find() -> Path:
        found = getattr(__import__(module), attribute)
        return Path(str(found() if callable(found) else found))

    return find


CANDIDATES: dict[str, Callable[[], Render]] = {
    "fpdf2-otf-jp": lambda: fpdf2(package_font("pylopdf_fonts_jp", "sans_path")()),
    "fpdf2-otf-cjk": lambda: fpdf2(package_font("noto_cjk_sans_jp_regular", "FONT_PATH")()),
    "fpdf2-ttf": lambda: fpdf2(TRUETYPE_FONT),
    "reportlab-ttf": lambda: reportlab(TRUETYPE_FONT),
    "receipts-ja": lambda: receipts("ja_JP"),
    "receipts-en": lambda: receipts("en_US"),
}
NOTES = {
    "fpdf2-otf-jp": "fpdf2 2.8, Noto Sans JP (CFF) from pylopdf-fonts-jp, 4.5 MB",
    "fpdf2-otf-cjk": "fpdf2 2.8, Noto Sans CJK JP (CFF) from noto-cjk-sans-jp-regular, 16 MB",
    "fpdf2-ttf": "fpdf2 2.8, the TrueType Noto Sans JP of receipts/receipt/fonts",
    "reportlab-ttf": "ReportLab, the TrueType Noto Sans JP, registered once per process",
    "receipts-ja": "receipts.receipt.pdf (ReportLab), the full sample receipt in Japanese",
    "receipts-en": "receipts.receipt.pdf (ReportLab), the full sample receipt in English",
}


def measure(render: Render, number: int) -> tuple[float, int, bool]:
    first = render()  # warm caches, as a running worker has them
    times = []
    for _ in range(number):
        started = time.process_time()
        render()
        times.append(time.process_time() - started)
    return statistics.median(times) * 1000, len(first), render() == first


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=300, help="renders per candidate")
    parser.add_argument("--only", nargs="*", choices=sorted(CANDIDATES))
    args = parser.parse_args()
    for name in args.only or CANDIDATES:
        try:
            render = CANDIDATES[name]()
        except ImportError as missing:
            print(f"{name:15} skipped: {missing}")
            continue
        ms, size, same = measure(render, args.number)
        print(
            f"{name:15} median {ms:7.2f} ms CPU per receipt, {size:7} bytes, "
            f"{'same bytes' if same else 'DIFFERENT bytes'} twice ({args.number} renders; "
            f"{NOTES[name]})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
