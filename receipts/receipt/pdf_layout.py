"""A one-column A4 document of finished strings, drawn as PDF bytes.

The receipt (and the refund receipt) is described as a
:class:`Document`: a heading, a title, labelled header fields, an addressee,
item rows, total rows and closing notes, every string already translated and
formatted. :func:`draw` lays it out: labels on the left, amounts aligned
right, long texts wrapped, new pages when the rows run past the bottom. The
same document gives the same bytes: the PDF's dates are the document's own
(its payment time) and its identifier is a digest of its content.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from reportlab.lib.pagesizes import A4
from reportlab.pdfgen.canvas import Canvas

from receipts.receipt.pdf_fonts import runs, width

PAGE_WIDTH, PAGE_HEIGHT = A4
MARGIN = 50.0
RIGHT = PAGE_WIDTH - MARGIN
TEXT = 10.0  # point size of body text
SMALL = 8.5
LEADING = 1.45  # line height, times the point size
GREY = (0.38, 0.38, 0.38)
RULE = (0.8, 0.8, 0.8)
# CJK characters (a line may break between any two), other words with their spaces, spaces.
# As Japanese is set (kinsoku), closing marks stay with what they close and opening ones
# with what they open: no line starts with a full stop or a closing bracket.
_WIDE = "\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
# Ideographic comma and full stop, middle dot, fullwidth punctuation and closing brackets,
# the long vowel mark and the repetition mark.
_CLOSING = (
    "\u3001\u3002\uff0c\uff0e\u30fb\uff1a\uff1b\uff01\uff1f"
    "\uff09\u300d\u300f\u3011\u3015\u3009\u300b\u30fc\u3005"
)
_OPENING = "\uff08\u300c\u300e\u3010\u3014\u3008\u300a"  # opening brackets
TOKENS = re.compile(rf"[{_OPENING}]*[{_WIDE}][{_CLOSING}]*\s*|[^\s{_WIDE}]+[{_CLOSING}]*\s*|\s+")


@dataclass(frozen=True, kw_only=True)
class Row:
    """An item or a total: a label, an amount aligned right, a note under the label."""

    label: str
    amount: str = ""
    note: str | None = None  # "Nov 30 - Dec 30, 2025"
    strong: bool = False  # the total, the amount paid


@dataclass(frozen=True, kw_only=True)
class Document:
    language: str  # "ja", "pt-BR": the PDF's /Lang
    title: str  # the PDF's title, shown under the heading
    heading: str  # who it is from, large
    lead: str | None = None  # one sentence under the title: what was paid
    fields: tuple[tuple[str, str], ...] = ()  # ("Invoice number", "SAMPLE-0001")
    addressee_label: str | None = None  # "Billed to"
    addressee: tuple[str, ...] = ()
    items_label: str | None = None  # "Items"
    items: tuple[Row, ...] = ()
    totals: tuple[Row, ...] = ()
    notes: tuple[str, ...] = ()
    author: str | None = None
    dated: int | None = None  # unix time: the PDF's creation date
    subject: str = ""
    keywords: tuple[str, ...] = field(default_factory=tuple)


def draw(document: Document) -> bytes:
    """The PDF of ``document``, the same bytes for the same document."""
    out = io.BytesIO()
    canvas = Canvas(out, pagesize=A4, invariant=True, pageCompression=True, lang=document.language)
    canvas.setTitle(document.title)
    canvas.setAuthor(document.author or "")
    canvas.setSubject(document.subject)
    canvas.setCreator("receipts")
    canvas.setKeywords(", ".join(document.keywords))
    canvas.setDateFormatter(_pdf_date(document.dated))
    _Writer(canvas).document(document)
    canvas.save()
    return out.getvalue()


def _pdf_date(dated: int | None) -> Callable[..., str]:
    moment = datetime.fromtimestamp(dated or 0, tz=UTC)
    text = moment.strftime("D:%Y%m%d%H%M%S+00'00'")
    return lambda *_: text


def wrap(text: str, size: float, room: float) -> list[str]:
    """``text`` in lines no wider than ``room``: between words, or anywhere in CJK text
    and in words too long for a line."""
    lines: list[str] = []
    for paragraph in text.splitlines() or [""]:
        line, used = "", 0.0
        for token in TOKENS.findall(paragraph):
            wide, trimmed = width(token, size), width(token.rstrip(), size)
            if line and used + trimmed > room:
                lines.append(line.rstrip())
                line, used = "", 0.0
                token = token.lstrip()
                wide, trimmed = width(token, size), width(token.rstrip(), size)
            if trimmed > room:
                *full, line = _split(line + token, size, room)
                lines.extend(full)
                used = width(line, size)
                continue
            line, used = line + token, used + wide
        lines.append(line.rstrip())
    return lines


def _split(text: str, size: float, room: float) -> list[str]:
    """A word longer than a line, cut where the line is full."""
    lines, line = [], ""
    for character in text:
        if line and width(line + character, size) > room:
            lines.append(line)
            line = ""
        line += character
    return [*lines, line]


class _Writer:
    """Draws top to bottom; starts a new page when the next block does not fit."""

    def __init__(self, canvas: Canvas) -> None:
        self.canvas = canvas
        self.y = PAGE_HEIGHT - MARGIN
        self.page = 1
        self.footer = ""

    def document(self, document: Document) -> None:
        self.footer = document.title
        self._content(document)
        if self.page > 1:
            self.page_footer()

    def _content(self, document: Document) -> None:
        self.text(document.heading, 17, strong=True)
        if document.title != document.heading:
            self.text(document.title, 11, colour=GREY)
        if document.lead:
            self.space(6)
            self.text(document.lead, TEXT)
        self.space(10)
        self.fields(document.fields)
        self.addressee(document.addressee_label, document.addressee)
        self.items(document.items_label, document.items)
        self.totals(document.totals)
        if document.notes:
            self.space(14)
            for note in document.notes:
                self.text(note, SMALL, colour=GREY)
                self.space(2)

    def addressee(self, label: str | None, lines: tuple[str, ...]) -> None:
        if not lines:
            return
        self.space(10)
        if label:
            self.text(label, SMALL, colour=GREY)
        for line in lines:
            self.text(line, TEXT)

    def items(self, label: str | None, items: tuple[Row, ...]) -> None:
        if not items:
            return
        self.space(12)
        if label:
            self.text(label, SMALL, colour=GREY)
        self.rule()
        for item in items:
            self.row(item, MARGIN)
        self.rule()

    def fields(self, fields: tuple[tuple[str, str], ...]) -> None:
        if not fields:
            return
        room = RIGHT - MARGIN
        label_width = min(max(width(label, TEXT) for label, _ in fields) + 14, room * 0.4)
        for label, value in fields:
            labels = wrap(label, TEXT, label_width - 14)
            values = wrap(value, TEXT, room - label_width)
            self.need(max(len(labels), len(values)) * TEXT * LEADING)
            top = self.y
            for line in labels:
                self.line_at(MARGIN, line, TEXT, colour=GREY)
            bottom, self.y = self.y, top
            for line in values:
                self.line_at(MARGIN + label_width, line, TEXT)
            self.y = min(self.y, bottom)

    def totals(self, totals: tuple[Row, ...]) -> None:
        if not totals:
            return
        self.space(4)
        left = MARGIN + (RIGHT - MARGIN) * 0.42
        for position, total in enumerate(totals):
            if total.strong and position:  # first of all, it stands under the items' rule
                self.rule(left)
            self.row(total, left)

    def row(self, row: Row, left: float) -> None:
        size = TEXT + (1 if row.strong else 0)
        amount_width = width(row.amount, size)
        labels = wrap(row.label, size, max(RIGHT - left - amount_width - 16, 60))
        notes = wrap(row.note, SMALL, RIGHT - left - amount_width - 16) if row.note else []
        self.need(len(labels) * size * LEADING + len(notes) * SMALL * LEADING)
        top = self.y
        for line in labels:
            self.line_at(left, line, size, strong=row.strong)
        for line in notes:
            self.line_at(left, line, SMALL, colour=GREY)
        self.y, bottom = top, self.y
        self.line_at(RIGHT - amount_width, row.amount, size, strong=row.strong)
        self.y = bottom - 2

    def text(self, text: str, size: float, *, colour: tuple[float, ...] = (0, 0, 0),
             strong: bool = False) -> None:  # fmt: skip
        for line in wrap(text, size, RIGHT - MARGIN):
            self.need(size * LEADING)
            self.line_at(MARGIN, line, size, colour=colour, strong=strong)

    def line_at(self, x: float, line: str, size: float, *, colour: tuple[float, ...] = (0, 0, 0),
                strong: bool = False) -> None:  # fmt: skip
        """One line of text with its top at the current height; moves below it."""
        self.y -= size * LEADING
        canvas = self.canvas
        canvas.saveState()  # colour and text render mode end with the line
        canvas.setFillColorRGB(*colour)
        text = canvas.beginText(x, self.y + size * (LEADING - 1) / 2)
        if strong:  # the fonts have one weight: a thin outline of the glyphs makes it bold
            canvas.setStrokeColorRGB(*colour)
            canvas.setLineWidth(size * 0.035)
            text.setTextRenderMode(2)
        for font, piece in runs(line):
            text.setFont(font, size)
            text.textOut(piece)
        canvas.drawText(text)
        canvas.restoreState()

    def rule(self, left: float = MARGIN) -> None:
        self.need(8)
        self.y -= 4
        self.canvas.setStrokeColorRGB(*RULE)
        self.canvas.setLineWidth(0.6)
        self.canvas.line(left, self.y, RIGHT, self.y)
        self.y -= 4

    def space(self, points: float) -> None:
        self.y -= points

    def need(self, height: float) -> None:
        if self.y - height < MARGIN:
            self.page_footer()
            self.canvas.showPage()
            self.page += 1
            self.y = PAGE_HEIGHT - MARGIN

    def page_footer(self) -> None:
        """On a receipt of several pages, each says whose it is and which page it is."""
        y = self.y
        self.y = MARGIN * 0.6
        text = f"{self.footer} \u00b7 {self.page}"
        self.line_at(RIGHT - width(text, SMALL), text, SMALL, colour=GREY)
        self.y = y
