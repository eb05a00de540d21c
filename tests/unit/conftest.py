"""The unit tier runs without a database: asking for one is a mistake of tier."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def server_url() -> str:
    """Overrides the suite's database server for this tier: a unit test that needs
    one (directly or through ``database_url``, ``db``, ``app``…) fails here."""
    pytest.fail("tests/unit runs without a database: this test belongs in tests/db")
