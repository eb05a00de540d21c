"""Screenshots of the console's pages, at a phone's and a laptop's width, to look at.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python -m tests.browser.screenshots /tmp/console-shots

makes a database of its own on that server (dropped afterwards), fills it
with a month of receipts and the ACME-0102 incident (tests/browser/scenes.py),
and saves, at 390 px and 800 px: the search results, a receipt's timeline,
the review queue and the status page; then the incident's walk-through, one
picture per step, from the login form to the resend recorded as sent. The
pictures are for people to look at before a change to the console lands;
they are not kept in the repository.
"""

from __future__ import annotations

import base64
import os
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from selenium.webdriver.common.by import By
from werkzeug.serving import make_server

from receipts.config import load_settings
from receipts.delivery.configured import provider_from_settings
from receipts.delivery.worker import run_worker
from tests.browser.chromium import chromium
from tests.browser.scenes import busy_month, incident
from tests.console_client import PASSWORD, console_app, console_environ
from tests.databases import DatabasePool
from tests.fake_provider import running_fake_provider
from tests.helpers import METRICS_TOKEN
from tests.stripe_events import TEST_SECRET

WIDTHS = (390, 800)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not os.environ.get("DATABASE_URL"):
        print("usage: DATABASE_URL=postgresql://… python -m tests.browser.screenshots OUT_DIR")
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    pool = DatabasePool(os.environ["DATABASE_URL"])
    try:
        with pool.migrated() as url, running_fake_provider(api_key="re_shots") as fake:
            environ = console_environ(
                {
                    "DATABASE_URL": url,
                    "STRIPE_WEBHOOK_SECRET": TEST_SECRET,
                    "EMAIL_FROM": "Acme Billing <billing@acme.example>",
                    "RECEIPTS_METRICS_TOKEN": METRICS_TOKEN,
                }
            )
            worker = {**environ, "RESEND_API_KEY": "re_shots", "RESEND_API_URL": fake.url}
            _take(out, environ, worker)
    finally:
        pool.close()
    print(f"screenshots in {out}")
    return 0


def _take(out: Path, environ: dict[str, str], worker_environ: dict[str, str]) -> None:
    with console_app(environ) as app:
        server = make_server("127.0.0.1", 0, app, threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_port}"
        client = app.test_client()
        with psycopg.connect(environ["DATABASE_URL"], autocommit=True, row_factory=dict_row) as db:
            busy_month(client, db)
            key = incident(client)
        _work(worker_environ)
        try:
            _main_pages(out, base, key)
            _walk_through(out, base, key, worker_environ)
        finally:
            server.shutdown()


def _work(environ: dict[str, str]) -> None:
    settings = load_settings({**environ, "RECEIPTS_SEND_RATE": "0"})
    provider = provider_from_settings(settings, concurrency=1)
    try:
        run_worker(settings, provider, concurrency=1)
    finally:
        provider.close()


def _main_pages(out: Path, base: str, key: str) -> None:
    for width in WIDTHS:
        with chromium(width, 900) as browser:
            _log_in(browser, base)
            for name, path in (
                ("search-results", "/console/?q=mo@example.com"),
                ("search-nothing", "/console/?q=ACME-0999"),
                ("timeline", f"/console/receipt/{key}"),
                ("review-queue", "/console/review"),
                ("status", "/console/status"),
            ):
                browser.get(base + path)
                _shoot(browser, out / f"{name}-{width}.png", width)


def _walk_through(out: Path, base: str, key: str, worker_environ: dict[str, str]) -> None:
    """The incident from the console alone, as support does it: one picture per step."""
    with chromium(390, 900) as browser:
        browser.get(base + "/console/")
        _shoot(browser, out / "step1-login.png", 390)
        browser.find_element(By.ID, "name").send_keys("olga")
        browser.find_element(By.ID, "password").send_keys(PASSWORD)
        browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
        browser.find_element(By.ID, "q").send_keys("ACME-0102")
        _shoot(browser, out / "step2-search.png", 390)
        browser.find_element(By.CSS_SELECTOR, "form.search button").click()
        _shoot(browser, out / "step3-timeline.png", 390)
        browser.find_element(By.LINK_TEXT, "Resend…").click()
        browser.find_element(By.ID, "to").send_keys("jenny.rosen@example.com")
        browser.find_element(By.ID, "reason").send_keys(
            "Customer wrote in: no receipt for ACME-0102; the invoice had no email. "
            "Address confirmed by reply."
        )
        _shoot(browser, out / "step4-decide.png", 390)
        browser.find_element(By.CSS_SELECTOR, "form.stack button[type=submit]").click()
        _shoot(browser, out / "step5-decided.png", 390)
        _work(worker_environ)
        browser.find_element(By.LINK_TEXT, "Resend #1").click()
        _shoot(browser, out / "step6-resend-sent.png", 390)


def _log_in(browser: Any, base: str) -> None:
    browser.get(base + "/console/login")
    browser.find_element(By.ID, "name").send_keys("olga")
    browser.find_element(By.ID, "password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()


def _shoot(browser: Any, path: Path, width: int) -> None:
    """The whole page, however long, at ``width`` CSS pixels (Chromium's DevTools protocol)."""
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": 800, "deviceScaleFactor": 1, "mobile": width < 500},
    )
    shot = browser.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}
    )
    path.write_bytes(base64.b64decode(shot["data"]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
