"""``receipts preview EVENT.json``: the receipt an event would become, with no database.

It reads a saved ``invoice.paid`` event (as ``stripe events retrieve`` or the
Dashboard shows it; ``-`` for stdin), or a paid invoice on its own (as
``stripe invoices retrieve`` prints it), renders it with the configured templates
(``RECEIPTS_TEMPLATE_DIR``), locale and time zone, and prints the text part,
the HTML part, the whole message as an ``.eml`` file, or the receipt's PDF
(``--format pdf``, as ``RECEIPTS_ATTACH_PDF`` attaches it; written to
``--output FILE`` or a redirected standard output, never to a terminal). An
``.eml`` carries the PDF when ``RECEIPTS_ATTACH_PDF`` is true. No signature is
checked and nothing is stored, so a template change can be checked before a
deploy. It decides as the service does (``RECEIPTS_SEND_ZERO_VALUE``
included): an event the service would not send a receipt for exits 1 and
says why, and so does one whose receipt would go to review at its first
claim (``receipt_does_not_add_up``, with the numbers). A thin event
notification carries no invoice; preview says what to save instead.

``--kind refund`` and ``--kind credit-note`` preview the refund receipt and
the credit note email: of the built-in sample (no file), or of a file holding
the render input the service stores for one (``email_outbox.render_input``:
the ``refund`` or ``credit_note`` object with the ``invoice`` it belongs to,
as in ``examples/render_input/``). Such an email that would go to review
(a credit note that does not add up) exits 1 with the numbers, as a receipt
does. ``--kind refund --format pdf`` writes the refund receipt's PDF
(``refund-<invoice number>.pdf`` as ``RECEIPTS_ATTACH_PDF`` attaches it); a
credit note has none (its email links Stripe's own).
"""

from __future__ import annotations

import argparse
import base64
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
from receipts.receipt.invoice_values import UnusableInvoice
from receipts.receipt.payload import render_payload
from receipts.receipt.rendering import Renderer
from receipts.receipt.samples import sample_credit_note_inputs, sample_refund_inputs

FORMATS = ("text", "html", "eml", "pdf")
# --kind: the email to preview, and the render input's own name for it.
KINDS = {"receipt": None, "refund": "refund", "credit-note": "credit_note"}
SAMPLE_KEYS = {
    "refund": "platform/test/in_1Sample/refund-re_1SamplePartial",
    "credit_note": "platform/test/in_1Sample/credit-note-cn_1SampleFull",
}
PREVIEW_FROM = "Receipts preview <receipts-preview@example.com>"
MAX_EVENT_BYTES = 16 * 1024 * 1024
THIN_EVENT = "v2.core.event"
# An invoice on its own (`stripe invoices retrieve in_…`) is previewed as if paid.
INVOICE_EVENT_ID = "evt_preview_of_an_invoice"


def _thin_event_needs(event: dict[str, Any]) -> str:
    related = event.get("related_object")
    invoice_id = related.get("id") if isinstance(related, dict) else None
    target = invoice_id if isinstance(invoice_id, str) else "in_…"
    return (
        "a thin event notification (v2.core.event) carries no invoice; save the invoice it "
        f"names and preview that: `stripe invoices retrieve {target} > invoice.json`, then "
        "`receipts preview invoice.json`"
    )


def _as_event(document: Any) -> Any:
    """The event to preview: the document itself, or an invoice wrapped as ``invoice.paid``."""
    if not isinstance(document, dict):
        return document
    if document.get("object") == THIN_EVENT:
        raise MalformedEvent(_thin_event_needs(document))
    if document.get("object") != "invoice":
        return document
    return {
        "id": INVOICE_EVENT_ID,
        "object": "event",
        "type": "invoice.paid",
        "livemode": document.get("livemode") is True,
        "created": document.get("created"),
        "data": {"object": document},
    }


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "event",
        metavar="EVENT.json",
        nargs="?",
        help="a saved Stripe event, or - for stdin; with --kind refund or credit-note, a "
        "stored render input (default: the built-in sample)",
    )
    parser.add_argument(
        "--kind",
        choices=tuple(KINDS),
        default="receipt",
        help="which email: the receipt of a paid invoice (default), a refund or a credit note",
    )
    parser.add_argument(
        "--format", choices=FORMATS, default="text", help="what to print (default: text)"
    )
    parser.add_argument(
        "--output",
        metavar="FILE",
        type=Path,
        help="write to FILE instead of standard output (what --format pdf needs on a terminal)",
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
        locale=locale,
        template_dir=settings.template_dir,
        timezone=settings.timezone,
        merchant_name=settings.merchant_name,
        support_email=settings.support_email,
        support_url=settings.support_url,
        attach_pdf=settings.attach_pdf or args.format == "pdf",
    )
    if args.format == "pdf" and args.output is None and sys.stdout.isatty():
        return _refuse(
            "--format pdf writes a binary file: give --output FILE, or redirect standard output"
        )
    kind = KINDS[args.kind]
    if kind is not None:
        return _preview_kind(args, kind, renderer, settings.email_from or PREVIEW_FROM)
    if args.event is None:
        return _refuse("name a saved event (EVENT.json, or - for stdin)")
    try:
        decision = derive_receipt(
            parse_event(_as_event(_read_event(args.event))),
            email_from=settings.email_from or PREVIEW_FROM,
            reply_to=settings.reply_to,
            send_zero_value=settings.send_zero_value,
        )
    except (OSError, ValueError, MalformedEvent) as error:
        return _refuse(str(error))
    if isinstance(decision, Ignored):
        return _refuse(f"no receipt: {decision.reason}")
    if isinstance(decision, UnsendableReceipt):
        return _refuse(f"needs review: {decision.reason}")
    try:
        payload = render_payload(decision.message_key, decision.render_input, renderer)
    except UnusableInvoice as unusable:  # what the worker's first claim would send to review
        return _refuse(f"needs review: {unusable}")
    return _write(args, _output(args.format, decision.message_key, payload))


def _write(args: argparse.Namespace, output: bytes) -> int:
    if args.output is not None:
        args.output.write_bytes(output)
        print(f"receipts preview: wrote {args.output} ({len(output)} bytes)", file=sys.stderr)
    else:
        sys.stdout.buffer.write(output)
        sys.stdout.flush()
    return 0


def _preview_kind(args: argparse.Namespace, kind: str, renderer: Renderer, sender: str) -> int:
    """A refund or credit note email, of the sample or of a stored render input."""
    if args.format == "pdf" and kind != "refund":
        return _refuse(
            "--format pdf: a credit note's email links Stripe's own PDF and attaches none; "
            "choose text, html or eml"
        )
    try:
        render_input = _render_input(args.event, kind, sender)
    except (OSError, ValueError) as error:
        return _refuse(str(error))
    invoice = render_input.get("invoice")
    invoice_id = invoice.get("id") if isinstance(invoice, dict) else None
    document = render_input.get(kind)
    document_id = document.get("id") if isinstance(document, dict) else None
    key = SAMPLE_KEYS[kind]
    if isinstance(invoice_id, str) and isinstance(document_id, str):
        purpose = "refund-" if kind == "refund" else "credit-note-"
        key = f"platform/test/{invoice_id}/{purpose}{document_id}"
    try:
        payload = render_payload(key, render_input, renderer)
    except UnusableInvoice as unusable:
        return _refuse(f"needs review: {unusable}")
    return _write(args, _output(args.format, key, payload))


def _render_input(name: str | None, kind: str, sender: str) -> dict[str, Any]:
    """The stored input of a refund or credit note email: the file's, else the sample's."""
    if name is None:
        samples = sample_refund_inputs() if kind == "refund" else sample_credit_note_inputs()
        return {**samples[0], "from": sender}
    document = _read_event(name)
    if not isinstance(document, dict) or not isinstance(document.get(kind), dict):
        raise ValueError(f"{name}: not the render input of a {kind.replace('_', ' ')}")
    if document.get("kind", kind) != kind:
        raise ValueError(f"{name}: the render input of a {document.get('kind')}, not a {kind}")
    return {"created": None, "reply_to": None, "api_facts": None, **document,
            "kind": kind, "from": document.get("from") or sender}  # fmt: skip


def _refuse(why: str) -> int:
    print(f"receipts preview: {why}", file=sys.stderr)
    return 1


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


def _output(form: str, message_key: str, payload: dict[str, Any]) -> bytes:
    if form == "text":
        return str(payload["text"]).encode()
    if form == "html":
        return str(payload["html"]).encode()
    if form == "pdf":
        [attached] = payload["attachments"]
        return base64.b64decode(attached["content"])
    body = json.dumps(payload, sort_keys=True).encode()
    return build_email(message_key, body).as_string().encode()
