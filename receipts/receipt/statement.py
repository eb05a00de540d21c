"""The amounts of a receipt as rows a customer can add up, checked before any email is made.

Stripe's ``subtotal`` has line-item discounts already taken off, while
``total_discount_amounts`` lists every discount, line-item ones included; a
receipt that shows both takes those discounts off twice. So the rows are
built, whatever the invoice's API version, as:

* the lines, each before any discount, and a subtotal equal to their sum
  (when the receipt lists every line; otherwise Stripe's subtotal with the
  line-item discounts added back);
* every discount once (two rows for the same coupon become one), shipping,
  each tax added on top (taxes included in the prices are shown, not added),
  and the total;
* what the customer's balance and credit notes did, what was marked as paid
  outside Stripe (before 2025-03-31.basil on top of ``amount_paid``, since
  then part of it), and the amount paid.

:func:`statement` checks that each step adds up to what Stripe says (the
total, the amount paid) and raises :class:`ReceiptDoesNotAddUp`, with the
numbers, when it does not: such a receipt is never sent, it goes to review
(docs/architecture.md, "Review reasons").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from receipts.receipt.invoice_facts import ReceiptFacts
from receipts.receipt.invoice_totals import Discount, Tax
from receipts.receipt.invoice_values import UnusableInvoice
from receipts.vocabulary import ReviewReason


class ReceiptDoesNotAddUp(UnusableInvoice):
    """The rows of the receipt would not add up to Stripe's total or amount paid."""

    def __init__(self, detail: str) -> None:
        super().__init__(ReviewReason.RECEIPT_DOES_NOT_ADD_UP, detail=detail)


@dataclass(frozen=True, kw_only=True)
class Statement:
    """Every amount row of one receipt, in minor units; each one positive or 0."""

    lines_sum: int | None  # the lines listed, when they are all of the invoice's
    subtotal: int | None  # None: nothing between the lines and the total
    discounts: tuple[Discount, ...]
    shipping: int
    added_taxes: tuple[Tax, ...]
    included_taxes: tuple[Tax, ...]  # part of the prices: shown, not added
    total: int
    credit_notes: int
    previous_balance: int
    credit_applied: int
    credit_added: int
    carried_forward: int
    paid_off_stripe: int  # marked as paid outside Stripe
    amount_paid: int

    @property
    def settled(self) -> int:
        """What this receipt is for: paid, taken from credit, or marked as paid."""
        return self.amount_paid + self.credit_applied + self.paid_off_stripe

    @property
    def adjusted(self) -> bool:
        """Whether anything stands between the total and the amount paid."""
        return self.total != self.amount_paid or any(
            (self.credit_notes, self.previous_balance, self.credit_applied,
             self.credit_added, self.carried_forward, self.paid_off_stripe)
        )  # fmt: skip

    def amounts(self) -> list[int]:
        """Every amount the rows show (for choosing the decimals once)."""
        return [
            *(found.amount for found in self.discounts),
            *(tax.amount for tax in (*self.added_taxes, *self.included_taxes)),
            *(value for value in (self.lines_sum, self.subtotal) if value is not None),
            self.shipping, self.total, self.credit_notes, self.previous_balance,
            self.credit_applied, self.credit_added, self.carried_forward,
            self.paid_off_stripe, self.amount_paid, self.settled,
        ]  # fmt: skip


def statement(facts: ReceiptFacts) -> Statement:
    """The rows of ``facts``; ReceiptDoesNotAddUp if they would not add up."""
    discounts = collapse(facts.discounts)
    added = tuple(tax for tax in facts.taxes if not tax.inclusive)
    on_top = facts.shipping or 0
    on_top += sum(tax.amount for tax in added) - sum(found.amount for found in discounts)
    complete = facts.lines_listed and bool(facts.lines) and not facts.lines_truncated
    lines_sum = sum(line.amount for line in facts.lines) if complete else None
    total = facts.total
    if total is None:  # the oldest or thinnest payloads: the amount paid is all there is
        total = _due_backwards(facts)
    subtotal = _subtotal(facts, lines_sum, discounts, total - on_top)
    if subtotal is not None and subtotal + on_top != total:
        raise ReceiptDoesNotAddUp(
            f"{facts.currency}: subtotal {subtotal} - discounts "
            f"{sum(d.amount for d in discounts)} + shipping {facts.shipping or 0} + taxes "
            f"{sum(t.amount for t in added)} = {subtotal + on_top}, but the total is {total}"
        )
    rows = Statement(
        lines_sum=lines_sum,
        subtotal=subtotal,
        discounts=discounts,
        shipping=facts.shipping or 0,
        added_taxes=added,
        included_taxes=tuple(tax for tax in facts.taxes if tax.inclusive),
        total=total,
        credit_notes=facts.credit_notes,
        previous_balance=facts.previous_balance,
        credit_applied=facts.credit_applied,
        credit_added=facts.credit_added,
        carried_forward=facts.carried_forward,
        paid_off_stripe=0,
        amount_paid=facts.amount_paid,
    )
    if facts.details.paid_out_of_band:  # before basil: not counted in amount_paid
        rows = replace(rows, paid_off_stripe=max(_due(rows) - facts.amount_paid, 0))
    elif 0 < (off := facts.details.paid_off_stripe or 0) <= facts.amount_paid:
        # Since basil amount_paid counts what was paid outside Stripe: the
        # receipt says how much was marked as paid, and charges only the rest.
        rows = replace(rows, paid_off_stripe=off, amount_paid=facts.amount_paid - off)
    if _due(rows) - rows.paid_off_stripe != rows.amount_paid:
        raise ReceiptDoesNotAddUp(
            f"{facts.currency}: total {total} - credit notes {rows.credit_notes} + previous "
            f"balance {rows.previous_balance} - credit {rows.credit_applied} + credit added "
            f"{rows.credit_added} - carried forward {rows.carried_forward} - paid outside "
            f"Stripe {rows.paid_off_stripe} = {_due(rows) - rows.paid_off_stripe}, but the "
            f"amount paid is {rows.amount_paid}"
        )
    return rows


def collapse(discounts: tuple[Discount, ...]) -> tuple[Discount, ...]:
    """One row per coupon and place: the same name, percentage and kind, on line items
    or on the whole invoice, are added together.

    A coupon on the invoice and the same coupon on one item stay two rows: added
    together, "10% Off" would stand beside an amount that is 10 % of nothing the
    customer can see.
    """
    merged: dict[tuple[object, ...], Discount] = {}
    for position, found in enumerate(discounts):
        key: tuple[object, ...] = (found.name, found.percent_off, found.credit, found.on_items)
        if found.name is None and found.percent_off is None and not found.credit:
            key = (position,)  # unnamed discounts stay apart
        earlier = merged.get(key)
        merged[key] = found if earlier is None else replace(
            earlier, amount=earlier.amount + found.amount
        )  # fmt: skip
    return tuple(merged.values())


def _subtotal(
    facts: ReceiptFacts, lines_sum: int | None, discounts: tuple[Discount, ...], implied: int
) -> int | None:
    """The subtotal row: the lines' sum, else Stripe's before line-item discounts."""
    if lines_sum is not None:
        return lines_sum
    if facts.subtotal is not None:
        return facts.subtotal + sum(found.amount for found in discounts if found.on_items)
    if discounts or facts.shipping or any(not tax.inclusive for tax in facts.taxes):
        return implied  # no subtotal given: the one the rows below need
    return None


def _due(rows: Statement) -> int:
    return (
        rows.total - rows.credit_notes + rows.previous_balance - rows.credit_applied
        + rows.credit_added - rows.carried_forward
    )  # fmt: skip


def _due_backwards(facts: ReceiptFacts) -> int:
    return (
        facts.amount_paid + facts.credit_notes - facts.previous_balance + facts.credit_applied
        - facts.credit_added + facts.carried_forward
    )  # fmt: skip
