"""What ``run_worker`` checks and chooses before it touches the database."""

from __future__ import annotations

from pathlib import Path

import pytest

from receipts.config import ConfigError, Settings, load_settings
from receipts.delivery.configured import provider_from_settings
from receipts.delivery.providers.file_sink import FileSinkProvider
from receipts.delivery.providers.resend import ResendProvider
from receipts.delivery.worker import effective_batch_size, run_worker

# Never connected to: every case here fails or chooses before the first query.
DATABASE_URL = "postgresql://postgres@127.0.0.1:9/receipts"


def test_resend_is_used_when_an_api_key_is_set() -> None:
    """RESEND_API_KEY set: the worker sends through Resend."""
    settings = load_settings({"DATABASE_URL": DATABASE_URL, "RESEND_API_KEY": "re_x"})
    provider = provider_from_settings(settings, concurrency=2)
    try:
        assert isinstance(provider, ResendProvider)
    finally:
        provider.close()


def test_the_file_sink_is_used_without_an_api_key(tmp_path: Path) -> None:
    """No API key but RECEIPTS_MAIL_DIR: the local .eml sink."""
    settings = load_settings({"DATABASE_URL": DATABASE_URL, "RECEIPTS_MAIL_DIR": str(tmp_path)})
    assert isinstance(provider_from_settings(settings, concurrency=1), FileSinkProvider)


def test_without_a_provider_the_config_error_names_resend_api_key() -> None:
    """Neither: a configuration error naming RESEND_API_KEY."""
    settings = load_settings({"DATABASE_URL": DATABASE_URL})
    with pytest.raises(ConfigError, match="RESEND_API_KEY"):
        provider_from_settings(settings, concurrency=1)


def test_a_lease_shorter_than_a_send_is_refused() -> None:
    """A lease that does not outlast connect + read timeout by more than 1 s
    could expire mid-send: refused before anything is claimed."""
    settings = Settings(
        database_url=DATABASE_URL,
        resend_api_key="re_x",
        provider_timeout=0.5,
        provider_connect_timeout=0.5,
        lease_seconds=2,
    )
    provider = provider_from_settings(settings, concurrency=1)
    try:
        with pytest.raises(ConfigError, match="RECEIPTS_LEASE_SECONDS"):
            run_worker(settings, provider)
    finally:
        provider.close()


def test_a_worker_without_a_database_url_is_refused() -> None:
    """No DATABASE_URL: a configuration error naming it."""
    settings = Settings(resend_api_key="re_x")
    provider = provider_from_settings(settings, concurrency=1)
    try:
        with pytest.raises(ConfigError, match="DATABASE_URL"):
            run_worker(settings, provider)
    finally:
        provider.close()


def test_batches_are_used_only_where_the_provider_takes_them_and_no_pdf_rides_along(
    tmp_path: Path,
) -> None:
    """RECEIPTS_BATCH_SIZE with Resend: that many per request; the .eml sink, or every
    receipt carrying its PDF: one per request."""
    resend = ResendProvider(api_url="https://api.resend.com", api_key="re_x",
                            connect_timeout=1, read_timeout=1)  # fmt: skip
    batched = Settings(batch_size=50)
    assert effective_batch_size(batched, resend) == 50
    assert effective_batch_size(batched, FileSinkProvider(tmp_path)) == 1
    assert effective_batch_size(Settings(batch_size=50, attach_pdf=True), resend) == 1
    assert effective_batch_size(Settings(), resend) == 1
