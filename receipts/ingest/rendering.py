"""Render the receipt email (subject, text, HTML) from Jinja templates.

Templates ship in ``receipts/ingest/templates/invoice_paid/``; a directory named by
``RECEIPTS_TEMPLATE_DIR`` may override any of them. Amounts are formatted with
Babel from Stripe's smallest currency unit, so zero-decimal (JPY, KRW) and
three-decimal (BHD, KWD) currencies come out right.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from babel.dates import format_date
from babel.numbers import format_currency, get_currency_precision
from jinja2 import (
    ChoiceLoader,
    Environment,
    FileSystemLoader,
    PackageLoader,
    StrictUndefined,
    select_autoescape,
)

TEMPLATE_FOLDER = "invoice_paid"

# Stripe's API keeps two decimal places for these although CLDR (and so Babel)
# gives them none: an ISK or HUF amount of 100 is one króna or forint.
_STRIPE_MINOR_UNIT_OVERRIDES = {"ISK": 2, "HUF": 2}


@dataclass(frozen=True, kw_only=True)
class InvoiceFacts:
    """The fields of a paid invoice that the email shows."""

    invoice_id: str
    number: str
    to: str
    customer_name: str | None
    amount: int  # in the currency's smallest unit, as Stripe sends it
    currency: str  # lower-case ISO 4217, as Stripe sends it
    paid_at: int | None  # unix seconds
    hosted_invoice_url: str
    invoice_pdf: str | None


@dataclass(frozen=True, kw_only=True)
class EmailContent:
    subject: str
    text: str
    html: str


def format_amount(amount: int, currency: str, locale: str) -> str:
    """Format an amount in minor units, e.g. (1999, 'usd') -> '$19.99'."""
    code = currency.upper()
    digits = _STRIPE_MINOR_UNIT_OVERRIDES.get(code, get_currency_precision(code))
    major = Decimal(amount).scaleb(-digits)
    # No quantization: a fractional forint must show, not round away.
    return format_currency(major, code, locale=locale, decimal_quantization=False)


def format_paid_date(paid_at: int | None, locale: str) -> str | None:
    if paid_at is None:
        return None
    return format_date(datetime.fromtimestamp(paid_at, tz=UTC).date(), "long", locale=locale)


class Renderer:
    """A Jinja environment bound to one locale and optional override directory."""

    def __init__(self, *, locale: str = "en_US", template_dir: Path | None = None) -> None:
        packaged = PackageLoader("receipts.ingest", "templates")
        loader = (
            ChoiceLoader([FileSystemLoader(str(template_dir)), packaged])
            if template_dir
            else packaged
        )
        self.locale = locale
        self._env = Environment(
            loader=loader,
            autoescape=select_autoescape(enabled_extensions=("html",), default=False),
            undefined=StrictUndefined,
            keep_trailing_newline=False,
            # Templates change only with a deploy, which restarts the process;
            # checking their mtimes on every render cost ~6% of ingest time.
            auto_reload=False,
        )

    def render(self, facts: InvoiceFacts) -> EmailContent:
        context = {
            "invoice": facts,
            "amount": format_amount(facts.amount, facts.currency, self.locale),
            "paid_date": format_paid_date(facts.paid_at, self.locale),
        }
        subject = self._render("subject.txt", context)
        return EmailContent(
            subject=" ".join(subject.split()),
            text=self._render("body.txt", context).strip() + "\n",
            html=self._render("body.html", context).strip() + "\n",
        )

    def _render(self, name: str, context: dict[str, object]) -> str:
        return self._env.get_template(f"{TEMPLATE_FOLDER}/{name}").render(context)
