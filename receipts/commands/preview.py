"""``receipts preview EVENT.json``: the receipt an event would become, with no database.

It reads a saved ``invoice.paid`` event (as ``stripe events retrieve`` or the
Dashboard shows it; ``-`` for stdin), renders it with the configured templates
(``RECEIPTS_TEMPLATE_DIR``), locale and time zone, and prints the text part,
the HTML part, or the whole message as an ``.eml`` file. No signature is
checked and nothing is stored, so a template change can be checked before a
deploy. An event that would not become an email exits 1 and says why.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from receipts.config import ConfigError, load_settings
from receipts.delivery.providers.message import build_email
from receipts.receipt.catalogs import parse_locale
from receipts.receipt.derivation import Ignored, UnsendableReceipt, derive_receipt
from receipts.receipt.event import MalformedEvent, parse_event
from receipts.receipt.payload import render_payload
from receipts.receipt.rendering import Renderer

FORMATS = ("text", "html", "eml")
PREVIEW_FROM = "Receipts preview <receipts-preview@example.com>"
MAX_EVENT_BYTES = 16 * 1024 * 1024


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("event", metavar="EVENT.json", help="a saved Stripe event, or - for stdin")
    parser.add_argument(
        "--format", choices=FORMATS, default="text", help="what to print (default: text)"
    )
    parser.add_argument(
        "--locale",
        help="render in this locale (de_DE, ja, pt-BR…) instead of RECEIPTS_LOCALE",
    )


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    settings = load_settings(environ)
    locale = settings.locale
    if args.locale is not None:
        if parse_locale(args.locale) is None:
            raise ConfigError("--locale", f"unknown locale {args.locale!r}")
        locale = args.locale
    renderer = Renderer(
        locale=locale, template_dir=settings.template_dir, timezone=settings.timezone
    )
    try:
        header = parse_event(_read_event(args.event))
        decision = derive_receipt(
            header,
            email_from=settings.email_from or PREVIEW_FROM,
            reply_to=settings.reply_to,
            send_zero_value=True,
        )
    except (OSError, ValueError, MalformedEvent) as error:
        print(f"receipts preview: {error}", file=sys.stderr)
        return 1
    if isinstance(decision, Ignored):
        print(f"receipts preview: no receipt: {decision.reason}", file=sys.stderr)
        return 1
    if isinstance(decision, UnsendableReceipt):
        print(f"receipts preview: needs review: {decision.reason}", file=sys.stderr)
        return 1
    payload = render_payload(decision.message_key, decision.render_input, renderer)
    sys.stdout.write(_output(args.format, decision.message_key, payload))
    return 0


def _read_event(name: str) -> Any:
    if name == "-":
        raw = sys.stdin.buffer.read(MAX_EVENT_BYTES + 1)
    else:
        with Path(name).open("rb") as source:
            raw = source.read(MAX_EVENT_BYTES + 1)
    if len(raw) > MAX_EVENT_BYTES:
        raise ValueError(f"event is larger than {MAX_EVENT_BYTES} bytes")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise ValueError(f"{name}: not JSON") from None


def _output(form: str, message_key: str, payload: dict[str, Any]) -> str:
    if form == "text":
        return str(payload["text"])
    if form == "html":
        return str(payload["html"])
    body = json.dumps(payload, sort_keys=True).encode()
    return build_email(message_key, body).as_string()
