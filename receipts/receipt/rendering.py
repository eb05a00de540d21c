"""Render the receipt email (subject, text, HTML) from Jinja templates, in the reader's language.

Templates ship in ``receipts/receipt/templates/invoice_paid/`` (the receipt),
``refund/`` (a refund receipt) and ``credit_note/``; a directory named by
``RECEIPTS_TEMPLATE_DIR`` may override any of them. Every template is
compiled, and tried on the sample receipts, refunds and credit notes
(:mod:`receipts.receipt.samples`) in the configured locale, when the
:class:`Renderer` is built, which the web process does at start-up: a broken
template stops the start with one line naming the file and line
(:class:`~receipts.config.ConfigError`) instead of failing every webhook.
The templates are the same code in every language, and the catalogs are
checked by the tests; trying the samples in every language as well would load
Babel's data for all of them into every web worker (about 1 MB each) before
any customer needs it.

The language of one receipt is the customer's first preferred locale that a
catalog exists for (``preferred_locales``, known only through Stripe's API),
else ``RECEIPTS_LOCALE``; amounts, dates and country names follow that locale.

Who the receipt is from: the invoice's ``account_name``, else
``RECEIPTS_MERCHANT_NAME``, else the display name of the sender
(``EMAIL_FROM``); where to ask: ``RECEIPTS_SUPPORT_EMAIL`` and
``RECEIPTS_SUPPORT_URL``. The worker renders at a row's first claim with the
settings it has then, and the email is frozen from that moment.

The text part is written with ASCII spaces only: the no-break and narrow
no-break spaces CLDR puts in amounts and times ("12:00\u202fAM") show as
boxes or stray characters in some plain-text mail clients.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from email.utils import parseaddr
from functools import cache, lru_cache, partial
from gettext import NullTranslations
from pathlib import Path
from typing import Any, Generic, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from babel import Locale
from babel.dates import format_date
from jinja2 import Template, TemplateError, TemplateSyntaxError

from receipts.config import ConfigError, Settings
from receipts.receipt.after_payment import (
    CREDIT_NOTE,
    REFUND,
    CreditNoteFacts,
    RefundFacts,
    read_credit_note,
    read_refund,
)
from receipts.receipt.after_payment_views import RefundView, present_credit_note, present_refund
from receipts.receipt.api_facts import PaymentMethod
from receipts.receipt.catalogs import SOURCE_LANGUAGE, catalog_language, load_catalogs, parse_locale
from receipts.receipt.invoice_facts import ReceiptFacts
from receipts.receipt.pdf_fonts import registered
from receipts.receipt.presentation import Contact, ReceiptView, present
from receipts.receipt.samples import (
    SAMPLE_PAYMENT_METHOD,
    sample_credit_note_inputs,
    sample_receipts,
    sample_refund_inputs,
)
from receipts.receipt.template_env import environment, messages, template_line
from receipts.receipt.untrusted import one_line

TEMPLATE_FOLDER = "invoice_paid"
# The folder of each kind of email after the payment (``render_input["kind"]``).
KIND_FOLDERS = {REFUND: "refund", CREDIT_NOTE: "credit_note"}
TEMPLATE_NAMES = ("subject.txt", "body.txt", "body.html")
_PACKAGED = "receipts/receipt/templates"
# Spaces CLDR writes that a plain-text part shows as ordinary spaces.
_WIDE_SPACES = ("\u00a0", "\u202f", "\u2009", "\u2007")


@dataclass(frozen=True, kw_only=True)
class EmailContent:
    subject: str
    text: str
    html: str


View = TypeVar("View")


@dataclass(frozen=True, kw_only=True)
class Presented(Generic[View]):
    """The view an email's templates get, with the language it is written in (for its PDF)."""

    view: View
    locale: Locale
    translations: NullTranslations


PresentedReceipt = Presented[ReceiptView]
PresentedRefund = Presented[RefundView]


@dataclass(frozen=True, kw_only=True)
class LegacyInvoice:
    """``invoice`` as templates written before the itemized receipt saw it."""

    invoice_id: str
    number: str
    to: str
    customer_name: str | None
    amount: int
    currency: str
    paid_at: int | None
    hosted_invoice_url: str
    invoice_pdf: str | None


class Renderer:
    """The compiled templates, every shipped language's messages, a default locale, a time zone.

    The templates are compiled once; a render passes its language's
    ``_``/``gettext``/``ngettext`` in the template context, which Jinja looks
    up before the globals, so one compiled template serves every language.
    """

    def __init__(
        self,
        *,
        locale: str = "en_US",
        template_dir: Path | None = None,
        timezone: str = "UTC",
        merchant_name: str | None = None,
        support_email: str | None = None,
        support_url: str | None = None,
        attach_pdf: bool = False,
    ) -> None:
        # RECEIPTS_ATTACH_PDF: render_payload adds the receipt as a PDF attachment; its
        # fonts are read now, so a process that cannot read them stops at start-up
        self.attach_pdf = attach_pdf
        if attach_pdf:
            try:
                registered()
            except (OSError, ValueError) as error:
                raise ConfigError(
                    "RECEIPTS_ATTACH_PDF", f"the PDF's fonts cannot be read: {error}"
                ) from None
        self.contact = Contact(
            merchant=merchant_name, support_email=support_email, support_url=support_url
        )
        default = parse_locale(locale)
        if default is None:
            raise ConfigError("RECEIPTS_LOCALE", f"unknown locale {locale!r}")
        self.locale = locale
        self._default = default
        try:
            self.timezone = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError("RECEIPTS_TIMEZONE", f"unknown time zone {timezone!r}") from None
        self._template_dir = template_dir
        self._catalogs = load_catalogs()
        self._messages = {
            (language, escaped): messages(translations, escaped=escaped)
            for language, translations in self._catalogs.items()
            for escaped in (False, True)
        }
        self._templates = self._compile()
        self._kind_templates = {folder: self._compile(folder) for folder in KIND_FOLDERS.values()}
        self._try_every_template()
        self._try_every_kind()

    @classmethod
    def from_settings(cls, settings: Settings) -> Renderer:
        return cls(
            locale=settings.locale,
            template_dir=settings.template_dir,
            timezone=settings.timezone,
            merchant_name=settings.merchant_name,
            support_email=settings.support_email,
            support_url=settings.support_url,
            attach_pdf=settings.attach_pdf,
        )

    def choose_locale(self, preferred: Sequence[str] = ()) -> str:
        """The first preferred locale a catalog exists for, else the configured one."""
        for tag in preferred:
            found = parse_locale(tag)
            if found is not None and catalog_language(found) is not None:
                return str(found)
        return self.locale

    def render(
        self,
        facts: ReceiptFacts,
        *,
        locale: str | None = None,
        payment_method: PaymentMethod | None = None,
        receipt_number: str | None = None,
        sender: str | None = None,
    ) -> EmailContent:
        """The email of ``facts``; ReceiptDoesNotAddUp if its rows would not add up.

        ``sender``: the From address, whose display name names the merchant
        when neither the invoice nor RECEIPTS_MERCHANT_NAME does.
        """
        chosen = self._chosen(locale)
        contact = self._contact(sender)
        context = self._context(facts, chosen, payment_method, receipt_number, contact)
        return self._content(self._templates, context, chosen)

    def render_refund(
        self,
        facts: RefundFacts,
        *,
        locale: str | None = None,
        payment_method: PaymentMethod | None = None,
        sender: str | None = None,
    ) -> EmailContent:
        """The refund receipt of ``facts``: how much, to which payment method, when."""
        presented = self.present_refund(
            facts, locale=locale, payment_method=payment_method, sender=sender
        )
        templates = self._kind_templates[KIND_FOLDERS[REFUND]]
        return self._content(templates, _refund_context(presented), presented.locale)

    def present_refund(
        self,
        facts: RefundFacts,
        *,
        locale: str | None = None,
        payment_method: PaymentMethod | None = None,
        sender: str | None = None,
    ) -> PresentedRefund:
        """What :meth:`render_refund` shows of ``facts``, as finished strings in its language."""
        return self._presented(
            partial(present_refund, facts, payment_method=payment_method), locale, sender
        )

    def render_credit_note(
        self,
        facts: CreditNoteFacts,
        *,
        locale: str | None = None,
        payment_method: PaymentMethod | None = None,
        sender: str | None = None,
    ) -> EmailContent:
        """The credit note email of ``facts``: the lines credited and how it was settled."""
        chosen = self._chosen(locale)
        context = self._credit_note_context(facts, chosen, payment_method, self._contact(sender))
        return self._content(self._kind_templates[KIND_FOLDERS[CREDIT_NOTE]], context, chosen)

    def _chosen(self, locale: str | None) -> Locale:
        return self._default if locale is None else parse_locale(locale) or self._default

    def _translations(self, locale: Locale) -> NullTranslations:
        return self._catalogs[catalog_language(locale) or SOURCE_LANGUAGE]

    def _contact(self, sender: str | None) -> Contact:
        """The settings' contact; the sender's display name when nothing names the merchant."""
        contact = self.contact
        if contact.merchant is None and sender:
            contact = Contact(
                merchant=display_name(sender),
                support_email=contact.support_email,
                support_url=contact.support_url,
            )
        return contact

    def _content(
        self, templates: dict[str, Template], context: dict[str, Any], locale: Locale
    ) -> EmailContent:
        language = catalog_language(locale) or SOURCE_LANGUAGE
        subject = self._render("subject.txt", context, language, templates)
        text = ascii_spaces(self._render("body.txt", context, language, templates))
        return EmailContent(
            subject=" ".join(subject.split()),
            text=text.strip() + "\n",
            html=self._render("body.html", context, language, templates).strip() + "\n",
        )

    def present(
        self,
        facts: ReceiptFacts,
        *,
        locale: str | None = None,
        payment_method: PaymentMethod | None = None,
        receipt_number: str | None = None,
        sender: str | None = None,
    ) -> PresentedReceipt:
        """What :meth:`render` shows of ``facts``, as finished strings in the receipt's language."""
        view = partial(present, facts, payment_method=payment_method, receipt_number=receipt_number)
        return self._presented(view, locale, sender)

    def _presented(
        self, view: Callable[..., View], locale: str | None, sender: str | None
    ) -> Presented[View]:
        """``view`` in the chosen language and time zone, for whom the sender names."""
        chosen = self._chosen(locale)
        translations = self._translations(chosen)
        shown = view(
            locale=chosen,
            translations=translations,
            timezone=self.timezone,
            contact=self._contact(sender),
        )
        return Presented(view=shown, locale=chosen, translations=translations)

    def _render(
        self,
        name: str,
        context: dict[str, Any],
        language: str,
        templates: dict[str, Template] | None = None,
    ) -> str:
        """One template, with its language's messages in the context, escaped for HTML."""
        template = (self._templates if templates is None else templates)[name]
        messages = self._messages[language, bool(self._autoescape(template.name))]
        return template.render({**context, **messages})

    def _context(
        self,
        facts: ReceiptFacts,
        locale: Locale,
        payment_method: PaymentMethod | None,
        receipt_number: str | None = None,
        contact: Contact | None = None,
    ) -> dict[str, Any]:
        receipt = present(
            facts,
            locale=locale,
            translations=self._translations(locale),
            timezone=self.timezone,
            payment_method=payment_method,
            receipt_number=receipt_number,
            contact=contact or self.contact,
        )
        return {
            "receipt": receipt,
            "locale": str(locale),
            "language": locale.language,
            # Kept for templates written before the itemized receipt.
            "invoice": LegacyInvoice(
                invoice_id=facts.invoice_id,
                number=facts.number,
                to=facts.to,
                customer_name=facts.customer_name,
                amount=facts.amount_paid,
                currency=facts.currency,
                paid_at=facts.paid_at,
                hosted_invoice_url=facts.hosted_invoice_url,
                invoice_pdf=facts.invoice_pdf,
            ),
            "amount": receipt.amount_paid,
            "paid_date": _Deferred(lambda: self._paid_date(facts.paid_at, locale)),
        }

    def _credit_note_context(
        self,
        facts: CreditNoteFacts,
        locale: Locale,
        payment_method: PaymentMethod | None,
        contact: Contact,
    ) -> dict[str, Any]:
        note = present_credit_note(
            facts,
            locale=locale,
            translations=self._translations(locale),
            timezone=self.timezone,
            payment_method=payment_method,
            contact=contact,
        )
        return {"credit_note": note, "locale": str(locale), "language": locale.language}

    def _paid_date(self, paid_at: int | None, locale: Locale) -> str:
        if paid_at is None:
            return ""
        return format_date(datetime.fromtimestamp(paid_at, tz=self.timezone), "long", locale=locale)

    def _compile(self, folder: str = TEMPLATE_FOLDER) -> dict[str, Template]:
        if self._template_dir is None or not self._overrides(folder):
            # The packaged templates change only with a deploy, which restarts
            # the process: every renderer of the process shares one compilation.
            compiled, self._autoescape = _packaged_templates(folder)
            return compiled
        compiled, self._autoescape = _compiled(self._template_dir, self._error, folder)
        return compiled

    def _overrides(self, folder: str) -> bool:
        """Whether RECEIPTS_TEMPLATE_DIR overrides a template of ``folder``.

        The receipt's folder is always compiled in the sandbox, as before; a
        refund or credit note folder the team does not override uses the
        packaged compilation, which saves its start about 0.3 s.
        """
        assert self._template_dir is not None
        if folder == TEMPLATE_FOLDER:
            return True
        return any((self._template_dir / folder / name).is_file() for name in TEMPLATE_NAMES)

    def _try_every_template(self) -> None:
        """Render two samples (everything present, everything optional absent) in the locale."""
        language = catalog_language(self._default) or SOURCE_LANGUAGE
        for facts in sample_receipts():
            context = self._context(facts, self._default, SAMPLE_PAYMENT_METHOD)
            for name, template in self._templates.items():
                try:
                    self._render(name, context, language)
                except Exception as error:  # a template may raise anything
                    line = template_line(error, template.filename)
                    problem = f"{type(error).__name__}: {error}"
                    raise self._error(f"{TEMPLATE_FOLDER}/{name}", line, problem) from None

    def _try_every_kind(self) -> None:
        """Render the sample refunds and credit notes with their templates, in the locale."""
        language = catalog_language(self._default) or SOURCE_LANGUAGE
        contexts: list[tuple[str, dict[str, Any]]] = []
        for render_input in sample_refund_inputs():
            facts = read_refund(render_input)
            presented = self.present_refund(facts, payment_method=facts.method)
            contexts.append((REFUND, _refund_context(presented)))
        for render_input in sample_credit_note_inputs():
            note = read_credit_note(render_input)
            method = SAMPLE_PAYMENT_METHOD if note.settlement.refunded else None
            contexts.append(
                (CREDIT_NOTE, self._credit_note_context(note, self._default, method, self.contact))
            )
        for kind, context in contexts:
            folder = KIND_FOLDERS[kind]
            templates = self._kind_templates[folder]
            for name, template in templates.items():
                try:
                    self._render(name, context, language, templates)
                except Exception as error:  # a template may raise anything
                    line = template_line(error, template.filename)
                    problem = f"{type(error).__name__}: {error}"
                    raise self._error(f"{folder}/{name}", line, problem) from None

    def _error(self, path: str, line: int | None, problem: str) -> ConfigError:
        """One line naming the template (and the line) that cannot be used."""
        overridden = self._template_dir is not None and (self._template_dir / path).is_file()
        variable = "RECEIPTS_TEMPLATE_DIR" if overridden else _PACKAGED
        where = f"{path} line {line}" if line else path
        return ConfigError(variable, f"{where}: {' '.join(problem.split())}")


Autoescape = Callable[[str | None], bool]


def _refund_context(presented: PresentedRefund) -> dict[str, Any]:
    locale = presented.locale
    return {"refund": presented.view, "locale": str(locale), "language": locale.language}


def _compiled(
    template_dir: Path | None,
    error: Callable[[str, int | None, str], ConfigError],
    folder: str = TEMPLATE_FOLDER,
) -> tuple[dict[str, Template], Autoescape]:
    """Every template of ``folder`` compiled; ``error`` makes the ConfigError for one that
    cannot be."""
    env = environment(template_dir)
    autoescape = env.autoescape
    escapes: Autoescape = autoescape if callable(autoescape) else lambda _: bool(autoescape)
    compiled = {}
    for name in TEMPLATE_NAMES:
        path = f"{folder}/{name}"
        try:
            compiled[name] = env.get_template(path)
        except TemplateSyntaxError as problem:
            raise error(path, problem.lineno, problem.message or "syntax error") from None
        except (TemplateError, UnicodeDecodeError, OSError) as problem:
            raise error(path, None, str(problem)) from None
    return compiled, escapes


@cache
def _packaged_templates(folder: str = TEMPLATE_FOLDER) -> tuple[dict[str, Template], Autoescape]:
    def packaged_error(path: str, line: int | None, problem: str) -> ConfigError:
        where = f"{path} line {line}" if line else path
        return ConfigError(_PACKAGED, f"{where}: {' '.join(problem.split())}")

    return _compiled(None, packaged_error, folder)


@lru_cache(maxsize=64)
def display_name(sender: str) -> str | None:
    """ "Acme Billing" of ``Acme Billing <billing@acme.example>``; None for a bare address."""
    return one_line(parseaddr(sender)[0], 100)


def ascii_spaces(text: str) -> str:
    """``text`` with every no-break, narrow and thin space written as a plain one, and no
    word joiner."""
    for space in _WIDE_SPACES:  # str.replace beats str.translate tenfold on these
        text = text.replace(space, " ")
    return text.replace("\u2060", "")  # word joiners keep HTML lines whole


class _Deferred:
    """Text a template may show, worked out only if it does (old templates' ``paid_date``)."""

    def __init__(self, compute: Callable[[], str]) -> None:
        self._compute = compute
        self._text: str | None = None

    def __str__(self) -> str:
        if self._text is None:
            self._text = self._compute()
        return self._text

    def __bool__(self) -> bool:
        return bool(str(self))
