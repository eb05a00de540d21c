"""The Jinja side of rendering: where templates come from, how they escape, how they translate."""

from __future__ import annotations

import traceback
from gettext import NullTranslations
from pathlib import Path
from typing import Any

from jinja2 import (
    ChoiceLoader,
    Environment,
    FileSystemLoader,
    PackageLoader,
    StrictUndefined,
    select_autoescape,
)
from jinja2.sandbox import ImmutableSandboxedEnvironment
from markupsafe import Markup


def environment(template_dir: Path | None) -> Environment:
    """The packaged templates, overridden by ``template_dir``; HTML autoescaped.

    With a template folder the environment is sandboxed: a template may read
    what it is given but not reach Python's internals
    (``cycler.__init__.__globals__``) or change what it reads, so write access
    to ``RECEIPTS_TEMPLATE_DIR`` is not code execution beside the provider's
    key. The packaged templates ship with the code and are trusted like it; the
    sandbox would cost them about half again their rendering time.
    """
    packaged = PackageLoader("receipts.receipt", "templates")
    loader = (
        ChoiceLoader([FileSystemLoader(str(template_dir)), packaged]) if template_dir else packaged
    )
    kind = ImmutableSandboxedEnvironment if template_dir else Environment
    env = kind(
        loader=loader,
        autoescape=select_autoescape(enabled_extensions=("html",), default=False),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        # Templates change only with a deploy, which restarts the process;
        # checking their mtimes on every render cost ~6% of ingest time.
        auto_reload=False,
        extensions=["jinja2.ext.i18n"],
    )
    # New-style {% trans %} blocks; the messages themselves come with each render.
    env.newstyle_gettext = True  # type: ignore[attr-defined]
    return env


def messages(translations: NullTranslations, *, escaped: bool) -> dict[str, Any]:
    """``_``/``gettext`` and ``ngettext`` as Jinja's new-style i18n defines them, in one call.

    Same semantics (the translation is a format string for the keyword
    arguments, marked safe for a template that escapes, ``num`` given to
    ``ngettext``) without the extension's alias and wrapper, which went through
    Jinja's context three times per message; a receipt has about 30. For HTML
    the safe form of each fixed message is kept instead of being made again.
    """
    safe: dict[str, str] = {}

    def translate(message: str) -> str:
        text = safe.get(message)
        if text is None:
            text = translations.gettext(message)
            if escaped:
                text = Markup(text)
                if len(safe) < _MAX_KEPT_MESSAGES:
                    safe[message] = text
        return text

    def gettext(message: str, /, **variables: Any) -> str:
        text = translate(message)
        # Formatting a message with no variable and no % in it changes nothing.
        if not variables and "%" not in text:
            return text
        return _one_full_stop(text % variables, variables)

    def ngettext(singular: str, plural: str, num: int, /, **variables: Any) -> str:
        variables.setdefault("num", num)
        text = translations.ngettext(singular, plural, num)
        return (Markup(text) if escaped else text) % variables

    return {"_": gettext, "gettext": gettext, "ngettext": ngettext}


def _one_full_stop(text: str, variables: dict[str, Any]) -> str:
    """ "… paid by Acme Tools, Inc." where a sentence ends on a name that ends with a stop."""
    if not text.endswith(".."):
        return text
    last = next(
        (v for v in variables.values() if isinstance(v, str) and text.endswith(v + ".")), None
    )
    return text[:-1] if last is not None and last.endswith(".") else text


# Fixed messages come from the templates; a template translating its data
# (``_(line.description)``) must not grow the cache without end.
_MAX_KEPT_MESSAGES = 1000


def template_line(error: BaseException, filename: str | None) -> int | None:
    """The template's own line in the traceback Jinja rewrote, if there is one."""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if filename is not None and frame.filename == filename:
            return frame.lineno
    return None
