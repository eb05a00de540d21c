"""The support console in a real browser: find a receipt, resend it, see what happened.

Chromium (headless) is driven through Selenium against the real web app and
database; the worker sends the resend to a local fake Resend. Every step is
what a support person does with a keyboard or a mouse: no JavaScript runs
in the console's pages, so what the browser shows is what the server sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

from receipts.config import load_settings
from receipts.delivery.configured import provider_from_settings
from receipts.delivery.worker import run_worker
from tests.browser.chromium import LiveConsole
from tests.browser.scenes import incident
from tests.console_client import PASSWORD
from tests.fake_provider import FakeProviderClient, running_fake_provider
from tests.outbox_states import Db, actions, row

API_KEY = "re_browser_test"


@pytest.fixture
def fake() -> Iterator[FakeProviderClient]:
    with running_fake_provider(api_key=API_KEY) as client:
        yield client


def _navigates(browser: Any, action: Any) -> None:
    """Run ``action`` (a click, a key) and wait until the page it leads to has
    replaced this one: a click returns before the form's request is answered."""
    page = browser.find_element(By.TAG_NAME, "html")
    action()
    WebDriverWait(browser, 10).until(expected_conditions.staleness_of(page))


def _log_in(browser: Any, console: LiveConsole, name: str) -> None:
    browser.get(f"{console.url}/console/")
    assert browser.current_url.startswith(f"{console.url}/console/login")
    browser.find_element(By.ID, "name").send_keys(name)
    password = browser.find_element(By.ID, "password")
    password.send_keys(PASSWORD)
    _navigates(browser, lambda: password.send_keys(Keys.ENTER))
    assert browser.current_url == f"{console.url}/console/"


def _search(browser: Any, text: str) -> None:
    box = browser.find_element(By.ID, "q")
    box.clear()
    box.send_keys(text)
    _navigates(browser, lambda: box.send_keys(Keys.ENTER))


def _page_text(browser: Any) -> str:
    return str(browser.find_element(By.TAG_NAME, "main").text)


def _work(console: LiveConsole, fake: FakeProviderClient) -> None:
    """One run of the worker, as the platform's cron starts it."""
    settings = load_settings(
        {
            "DATABASE_URL": console.app.extensions["receipts"].settings.database_url,
            "RESEND_API_KEY": API_KEY,
            "RESEND_API_URL": fake.url,
            "RECEIPTS_SEND_RATE": "0",
        }
    )
    provider = provider_from_settings(settings, concurrency=1)
    try:
        run_worker(settings, provider, concurrency=1)
    finally:
        provider.close()


def test_an_operator_finds_acme_0102_resends_it_to_the_right_address_and_sees_it_sent(
    live_console: LiveConsole, browser: Any, fake: FakeProviderClient, db: Db
) -> None:
    key = incident(live_console.app.test_client())
    _log_in(browser, live_console, "olga")
    _search(browser, "ACME-0102")
    assert browser.current_url == f"{live_console.url}/console/receipt/{key}"
    text = _page_text(browser)
    assert "needs a person: missing_customer_email" in text
    assert "The paid invoice has no customer email address" in text

    _navigates(browser, browser.find_element(By.LINK_TEXT, "Resend…").click)
    text = _page_text(browser)
    assert "This sends the receipt to the address you give below: the invoice had none." in text
    browser.find_element(By.ID, "to").send_keys("jenny.rosen@example.com")
    browser.find_element(By.ID, "reason").send_keys("Customer wrote in; confirmed the address")
    submit = browser.find_element(By.CSS_SELECTOR, "form.stack button[type=submit]")
    _navigates(browser, submit.click)

    assert browser.current_url == f"{live_console.url}/console/receipt/{key}?decided=resend"
    text = _page_text(browser)
    assert "Your decision (resend) was recorded" in text
    assert "olga resent it" in text
    assert "Customer wrote in; confirmed the address" in text
    [decision] = actions(db, key)
    assert decision["performed_by"] == "olga"

    _work(live_console, fake)
    [delivery] = fake.deliveries()
    assert json.loads(delivery["body"])["to"] == ["jenny.rosen@example.com"]
    _navigates(browser, browser.find_element(By.LINK_TEXT, "Resend #1").click)
    text = _page_text(browser)
    assert "sent" in browser.find_element(By.CSS_SELECTOR, "main .badge").text
    assert "Send attempt #1" in text and "provider answered\nHTTP 200" in text
    assert row(db, f"{key}/resend-1")["status"] == "sent"


def test_a_viewer_finds_the_receipt_but_is_offered_no_decision(
    live_console: LiveConsole, browser: Any, db: Db
) -> None:
    key = incident(live_console.app.test_client())
    _log_in(browser, live_console, "victor")
    _search(browser, "ACME-0102")
    text = _page_text(browser)
    assert "Only a console operator can decide" in text
    assert browser.find_elements(By.LINK_TEXT, "Resend…") == []
    browser.get(f"{live_console.url}/console/receipt/{key}/decide/resend")
    assert "Only a console operator can take decisions" in _page_text(browser)
    assert actions(db, key) == []


def test_the_pages_work_from_the_keyboard(live_console: LiveConsole, browser: Any) -> None:
    """Tab from the top of a page: the skip link first, then the console's navigation;
    Enter follows a link."""
    incident(live_console.app.test_client())
    _log_in(browser, live_console, "olga")
    browser.get(f"{live_console.url}/console/review")
    ActionChains(browser).send_keys(Keys.TAB).perform()
    assert browser.switch_to.active_element.text == "Skip to content"
    focused = []
    for _ in range(4):
        browser.switch_to.active_element.send_keys(Keys.TAB)
        focused.append(browser.switch_to.active_element.text)
    assert focused == ["receipts console", "Search", "Review queue", "Status"]
    _navigates(browser, lambda: browser.switch_to.active_element.send_keys(Keys.ENTER))
    assert browser.current_url == f"{live_console.url}/console/status"
