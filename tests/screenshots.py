"""Screenshots of real receipts in a real browser, to look at before a change lands.

``python -m tests.screenshots OUTDIR`` (or ``make screenshots``) renders four
example receipts (tax with two discounts, part paid from credit, marked as
paid outside Stripe, yen with tax included) in English and German, and with
``--locale`` in any other language, writes each HTML part to OUTDIR and
photographs it with headless Chromium at a phone's width (390 px) and a
desktop client's (800 px). Not part of the test suite: it needs Chromium
(``apt-get install -y chromium``) and a person to look at the pictures.
Keep OUTDIR out of the repository.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from receipts.receipt.payload import render_payload
from receipts.receipt.rendering import Renderer
from tests.receipt_examples import VISA, example, job

EXAMPLES = (
    "invoice_paid_tax_two_discounts",
    "invoice_paid_credit_balance",
    "invoice_paid_out_of_band",
    "invoice_paid_jpy",
)
LOCALES = ("en_US", "de_DE")
WIDTHS = (390, 800)
HEIGHT = 2200
CHROMIUM = "/usr/bin/chromium"


def render(name: str, locale: str) -> str:
    renderer = Renderer(
        locale=locale,
        merchant_name="Acme Tools, Inc.",
        support_email="help@acme.example",
        support_url="https://acme.example/help",
    )
    receipt = job(example(name), api_facts=None if "out_of_band" in name else VISA)
    return str(render_payload(receipt.message_key, receipt.render_input, renderer)["html"])


def screenshot(html: Path, png: Path, width: int, chromium: str) -> None:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}",
             f"--window-size={width},{HEIGHT}", f"--screenshot={png}", html.as_uri()],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.screenshots", description=__doc__)
    parser.add_argument("outdir", type=Path, help="where the HTML and PNG files go")
    parser.add_argument("--locale", action="append", help=f"instead of {', '.join(LOCALES)}")
    parser.add_argument("--chromium", default=CHROMIUM)
    args = parser.parse_args(argv)
    if shutil.which(args.chromium) is None:
        print(f"screenshots: no Chromium at {args.chromium} (apt-get install -y chromium)",
              file=sys.stderr)  # fmt: skip
        return 2
    args.outdir.mkdir(parents=True, exist_ok=True)
    for name in EXAMPLES:
        for locale in args.locale or LOCALES:
            page = args.outdir / f"{name}.{locale}.html"
            page.write_text(render(name, locale), encoding="utf-8")
            for width in WIDTHS:
                png = args.outdir / f"{name}.{locale}.{width}.png"
                screenshot(page, png, width, args.chromium)
                print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
