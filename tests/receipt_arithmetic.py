"""Read a receipt's text part back into numbers and add them up, as a customer would.

Independent of the renderer: the amounts are parsed from the text as printed
(en_US), the rows told apart by their labels, and the sums compared with the
invoice payload's own ``total`` and ``amount_paid``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

# The decimals of Stripe's integer amounts, written out here rather than imported.
_STRIPE_DECIMALS = {"jpy": 0, "krw": 0, "kwd": 3, "bhd": 3, "jod": 3, "omr": 3, "tnd": 3}
_AMOUNT = re.compile(r"(-?)[^\d\s-]*\s?(\d{1,3}(?:,\d{3})*(?:\.\d+)?)$")
FINAL_LABELS = ("Amount paid", "Amount charged")


@dataclass(frozen=True)
class Row:
    label: str
    minor: int  # in Stripe's minor unit
    decimals: int  # as printed


@dataclass(frozen=True)
class ReadBack:
    lines: list[Row]
    totals: list[Row]  # subtotal, discounts, taxes, total, balance rows, amount paid, incl. taxes
    lines_complete: bool


def amount(text: str, currency: str) -> tuple[int, int]:
    """ "-KWD 1.250" -> (-1250, 3): the amount in minor units and the decimals printed."""
    found = _AMOUNT.search(text.strip())
    assert found, f"no amount in {text!r}"
    sign, number = found.groups()
    digits = number.replace(",", "")
    printed = len(digits.split(".")[1]) if "." in digits else 0
    value = Decimal(digits).scaleb(_STRIPE_DECIMALS.get(currency, 2))
    assert value == value.to_integral_value(), f"{text!r} is finer than {currency} allows"
    return (-1 if sign else 1) * int(value), printed


def read_text_part(text: str, currency: str) -> ReadBack:
    """The item rows and the amount rows of a receipt's text part."""
    body = text.split("\nItems\n", 1)[1]
    items, rest = body.split("\n\n", 1)
    lines, complete = [], True
    for entry in items.splitlines():
        if not entry.startswith("- "):
            continue  # a billing period under the line above
        if entry.startswith(("- and ", "- See the invoice")):
            complete = False
            continue
        label, _, value = entry[2:].removesuffix(" (credit)").rpartition(": ")
        lines.append(Row(label, *amount(value, currency)))
    block = rest.split("\n\n", 1)[0]
    totals = []
    for entry in block.splitlines():
        label, _, value = entry.rpartition(": ")
        totals.append(Row(label, *amount(value, currency)))
    return ReadBack(lines=lines, totals=totals, lines_complete=complete and bool(lines))


def check_adds_up(read: ReadBack, *, total: int, amount_paid: int) -> None:
    """Lines to subtotal, subtotal to total, total to the amount paid: each step adds up."""
    labels = [row.label for row in read.totals]
    final = max(i for i, label in enumerate(labels) if label in FINAL_LABELS)
    before, included = read.totals[:final], read.totals[final + 1 :]
    assert all("incl." in row.label for row in included), included
    at_total = labels.index("Total") if "Total" in labels[:final] else None
    to_total = before if at_total is None else before[:at_total]
    settling = [] if at_total is None else before[at_total + 1 :]
    lines_sum = sum(row.minor for row in read.lines)
    if to_total and to_total[0].label == "Subtotal":
        start, added = to_total[0].minor, to_total[1:]
        if read.lines_complete:
            assert lines_sum == start, (lines_sum, start)
    elif read.lines_complete:
        start, added = lines_sum, to_total
    else:
        # Some lines only ("and more items"), no subtotal: the total is where the
        # arithmetic starts, and nothing may stand between it and the lines.
        assert not to_total, "rows without a subtotal to start from"
        start, added = read.totals[final if at_total is None else at_total].minor, []
    reached = start + sum(row.minor for row in added)
    if at_total is not None:
        assert read.totals[at_total].minor == reached, (read.totals[at_total], reached)
    else:
        assert read.totals[final].minor == reached or not read.lines, (read.totals[final], reached)
    assert reached == total or not (read.lines or to_total), (reached, total)
    assert reached + sum(row.minor for row in settling) == read.totals[final].minor
    assert read.totals[final].minor == amount_paid


def decimals_printed(read: ReadBack) -> set[int]:
    return {row.decimals for row in (*read.lines, *read.totals)}
