"""What the browser tier's tests and screenshot tool share: a served console and a
headless Debian Chromium driven through Selenium (no browser downloaded)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from flask import Flask

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


class BrowserMissing(RuntimeError):
    """Debian's chromium or chromium-driver is not installed."""


@dataclass(frozen=True)
class LiveConsole:
    app: Flask
    url: str  # http://127.0.0.1:PORT


@contextmanager
def chromium(width: int = 800, height: int = 1000) -> Iterator[Any]:
    """A headless Chromium with a fresh profile, quit and its profile removed on exit."""
    if shutil.which(CHROMIUM) is None or shutil.which(CHROMEDRIVER) is None:
        raise BrowserMissing(
            "apt-get install -y chromium chromium-driver (the browser tier needs both)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="receipts-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
    ):
        options.add_argument(argument)
    try:
        driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
        try:
            driver.set_page_load_timeout(30)
            yield driver
        finally:
            driver.quit()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
