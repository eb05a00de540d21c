"""The catalogs are complete: every message the templates and code use, in every shipped language.

The ``.po`` files are read at start-up (there is no compiled ``.mo`` to go
stale); this is the check that they, and ``receipts.pot``, follow the sources.
After changing a message: ``pybabel extract -F babel.cfg --no-location
--sort-output -o receipts/receipt/locales/receipts.pot .`` then ``pybabel update
-i receipts/receipt/locales/receipts.pot -d receipts/receipt/locales -D receipts``
and translate what it marks.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.frontend import parse_mapping_cfg
from babel.messages.pofile import read_po

from receipts.receipt.catalogs import (
    DOMAIN,
    LANGUAGES,
    LOCALES_DIR,
    SOURCE_LANGUAGE,
    catalog_path,
    load_catalogs,
)

ROOT = Path(__file__).resolve().parents[2]
TRANSLATED = [language for language in LANGUAGES if language != SOURCE_LANGUAGE]
PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def extracted() -> set[str | tuple[str, ...]]:
    """Message ids as ``pybabel extract -F babel.cfg`` finds them in the sources."""
    with (ROOT / "babel.cfg").open(encoding="utf-8") as config:
        method_map, options_map = parse_mapping_cfg(config)  # type: ignore[no-untyped-call]
    found: set[str | tuple[str, ...]] = set()
    for _file, _line, message, _comments, _context in extract_from_dir(
        ROOT, method_map, options_map
    ):
        found.add(message if isinstance(message, str) else tuple(message))
    return found


def ids(catalog: Catalog) -> set[str | tuple[str, ...]]:
    return {
        message.id if isinstance(message.id, str) else tuple(message.id)
        for message in catalog
        if message.id
    }


def read(path: Path, locale: str | None = None) -> Catalog:
    with path.open("rb") as source:
        return read_po(source, locale=locale, domain=DOMAIN, abort_invalid=True)


def test_the_template_catalog_lists_exactly_what_the_sources_use() -> None:
    """receipts.pot is current: no message missing, none left over."""
    assert ids(read(LOCALES_DIR / f"{DOMAIN}.pot")) == extracted()


@pytest.mark.parametrize("language", TRANSLATED)
def test_every_message_is_translated(language: str) -> None:
    """Each catalog has every message, none fuzzy or empty, every plural form filled."""
    catalog = read(catalog_path(language), language)
    assert ids(catalog) == extracted()
    for message in catalog:
        if not message.id:
            continue
        assert not message.fuzzy, message.id
        strings = message.string if isinstance(message.string, tuple) else (message.string,)
        assert len(strings) == (catalog.num_plurals if message.pluralizable else 1), message.id
        assert all(strings), message.id


@pytest.mark.parametrize("language", TRANSLATED)
def test_translations_keep_the_placeholders(language: str) -> None:
    """A translation with a missing or misspelt placeholder would fail or drop an amount."""
    for message in read(catalog_path(language), language):
        if not message.id:
            continue
        sources = (message.id,) if isinstance(message.id, str) else tuple(message.id)
        strings = (message.string,) if isinstance(message.string, str) else message.string or ()
        wanted = set(PLACEHOLDER.findall(sources[-1]))
        for string in strings:
            assert set(PLACEHOLDER.findall(string)) == wanted, (message.id, string)


def test_catalogs_load_from_their_sources_and_no_compiled_file_ships() -> None:
    """Translations come from the .po files themselves; a stale .mo cannot exist."""
    catalogs = load_catalogs()
    assert set(catalogs) == set(LANGUAGES)
    assert catalogs["de"].gettext("Total") == "Gesamtbetrag"
    assert not list(LOCALES_DIR.rglob("*.mo"))
