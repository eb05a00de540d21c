"""The receipt's languages: gettext catalogs read from their ``.po`` files at start-up.

Each shipped language has ``locales/<language>/LC_MESSAGES/receipts.po``. They
are parsed with Babel when the first :class:`~receipts.receipt.rendering.Renderer`
is built (a few milliseconds), so no compiled ``.mo`` file exists that could
fall behind its source. ``tests/unit/test_catalogs.py`` checks that every
message the templates and the code use is translated in every catalog.

English is the source language: its text is the message ids themselves.
"""

from __future__ import annotations

import gettext
from collections.abc import Mapping
from functools import lru_cache
from io import BytesIO
from pathlib import Path

from babel import Locale, UnknownLocaleError
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.support import Translations

LOCALES_DIR = Path(__file__).with_name("locales")
DOMAIN = "receipts"
SOURCE_LANGUAGE = "en"
# The languages a receipt can be written in; each but English has a catalog.
LANGUAGES = ("en", "de", "fr", "es", "pt_BR", "ja")


def catalog_path(language: str) -> Path:
    return LOCALES_DIR / language / "LC_MESSAGES" / f"{DOMAIN}.po"


@lru_cache(maxsize=1)
def load_catalogs() -> Mapping[str, gettext.NullTranslations]:
    """Every shipped language's translations, read once per process."""
    catalogs: dict[str, gettext.NullTranslations] = {SOURCE_LANGUAGE: gettext.NullTranslations()}
    for language in LANGUAGES:
        if language == SOURCE_LANGUAGE:
            continue
        with catalog_path(language).open("rb") as source:
            catalog = read_po(source, locale=language, domain=DOMAIN, abort_invalid=True)
        compiled = BytesIO()
        write_mo(compiled, catalog, use_fuzzy=False)
        compiled.seek(0)
        catalogs[language] = Translations(compiled, domain=DOMAIN)
    return catalogs


def parse_locale(tag: object) -> Locale | None:
    """A Babel locale for ``fr-CA``, ``pt_BR``, ``ja``…; None for anything Babel does not know."""
    if not isinstance(tag, str) or not 2 <= len(tag) <= 35:
        return None
    return _parse(tag)


@lru_cache(maxsize=256)
def _parse(tag: str) -> Locale | None:
    # Cached: parsing costs more than rendering a line of a receipt.
    try:
        return Locale.parse(tag.replace("-", "_"))
    except (ValueError, TypeError, UnknownLocaleError):
        return None


def catalog_language(locale: Locale) -> str | None:
    """The shipped language for a locale: same language and region first, then same language."""
    if locale.territory and f"{locale.language}_{locale.territory}" in LANGUAGES:
        return f"{locale.language}_{locale.territory}"
    for language in LANGUAGES:
        if language.split("_")[0] == locale.language:
            return language
    return None
