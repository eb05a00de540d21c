"""The provider and the send rate a worker uses, as the settings choose them."""

from __future__ import annotations

from receipts.config import ConfigError, Settings
from receipts.delivery.providers import FileSinkProvider, Provider, ResendProvider


def provider_from_settings(settings: Settings, *, concurrency: int) -> Provider:
    """Resend when RESEND_API_KEY is set, else the file sink if RECEIPTS_MAIL_DIR is."""
    if settings.resend_api_key:
        return ResendProvider(
            api_url=settings.resend_api_url,
            api_key=settings.resend_api_key,
            connect_timeout=settings.provider_connect_timeout,
            read_timeout=settings.provider_timeout,
            pool_size=concurrency,
        )
    if settings.mail_dir is not None:
        return FileSinkProvider(settings.mail_dir)
    raise ConfigError(
        "RESEND_API_KEY",
        "is required to send email (or set RECEIPTS_MAIL_DIR for the local .eml mail sink)",
    )


def send_rate(settings: Settings, provider: Provider) -> float:
    """``RECEIPTS_SEND_RATE``, else the provider's documented default (Resend's 5/s;
    the file sink: no cap). 0 means no cap."""
    return settings.send_rate if settings.send_rate is not None else provider.default_rate
