"""The browser tier: Debian's Chromium, driven through Selenium and its chromedriver.

Not part of the default run (``tests/conftest.py`` leaves this folder out
unless ``--browser`` is given); ``.ci/run`` runs it. Each test gets the real
web app on a local port, with its own database, and a headless Chromium
with a profile of its own. No browser is downloaded: the binaries are the
``chromium`` and ``chromium-driver`` packages.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from werkzeug.serving import make_server

from tests.browser.chromium import BrowserMissing, LiveConsole, chromium
from tests.console_client import console_app, console_environ


@pytest.fixture
def live_console(environ: dict[str, str]) -> Iterator[LiveConsole]:
    """The web app with the console on, served by werkzeug from a thread on a free port."""
    with console_app(console_environ(environ)) as app:
        server = make_server("127.0.0.1", 0, app, threaded=True)
        thread = threading.Thread(target=server.serve_forever, name="console", daemon=True)
        thread.start()
        try:
            yield LiveConsole(app=app, url=f"http://127.0.0.1:{server.server_port}")
        finally:
            server.shutdown()
            thread.join(timeout=10)


@pytest.fixture
def browser() -> Iterator[Any]:
    try:
        with chromium() as driver:
            yield driver
    except BrowserMissing as missing:
        pytest.fail(str(missing))
