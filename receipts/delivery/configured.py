"""The provider and the send rate a worker uses, as the settings choose them."""

from __future__ import annotations

from receipts.config import ConfigError, Settings
from receipts.delivery.providers.base import Provider
from receipts.delivery.providers.file_sink import FileSinkProvider
from receipts.delivery.providers.postmark import PostmarkProvider
from receipts.delivery.providers.resend import ResendProvider
from receipts.delivery.providers.smtp import SmtpProvider


def provider_from_settings(settings: Settings, *, concurrency: int) -> Provider:
    """``RECEIPTS_PROVIDER`` when set; else Resend when RESEND_API_KEY is set, else
    the file sink if RECEIPTS_MAIL_DIR is. A chosen provider's own settings are required."""
    chosen = settings.chosen_provider
    if chosen == "postmark":
        return _postmark(settings, concurrency)
    if chosen == "smtp":
        if settings.smtp is None:
            raise ConfigError("SMTP_URL", "is required with RECEIPTS_PROVIDER=smtp")
        return SmtpProvider(
            settings.smtp,
            connect_timeout=settings.provider_connect_timeout,
            read_timeout=settings.provider_timeout,
        )
    if chosen == "resend":
        if not settings.resend_api_key:
            raise ConfigError("RESEND_API_KEY", "is required with RECEIPTS_PROVIDER=resend")
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
        "is required to send email (or set RECEIPTS_PROVIDER=postmark|smtp with its "
        "settings, or RECEIPTS_MAIL_DIR for the local .eml mail sink)",
    )


def _postmark(settings: Settings, concurrency: int) -> PostmarkProvider:
    if not settings.postmark_server_token:
        raise ConfigError("POSTMARK_SERVER_TOKEN", "is required with RECEIPTS_PROVIDER=postmark")
    return PostmarkProvider(
        api_url=settings.postmark_api_url,
        server_token=settings.postmark_server_token,
        message_stream=settings.postmark_message_stream,
        retention_days=settings.postmark_retention_days,
        search_lag_seconds=settings.postmark_search_lag_seconds,
        connect_timeout=settings.provider_connect_timeout,
        read_timeout=settings.provider_timeout,
        pool_size=concurrency,
    )


def send_rate(settings: Settings, provider: Provider) -> float:
    """``RECEIPTS_SEND_RATE``, else the provider's documented default (Resend's 5/s;
    Postmark, SMTP and the file sink: no cap). 0 means no cap."""
    return settings.send_rate if settings.send_rate is not None else provider.default_rate


def fleet_rate(settings: Settings, provider: Provider) -> float:
    """Requests per second every worker process together may send before the provider
    states its own limit: ``RECEIPTS_SEND_SHARE`` of its documented team limit.
    0 (no fleet pace) when sending is uncapped or the provider documents no limit."""
    if send_rate(settings, provider) <= 0 or provider.default_rate <= 0:
        return 0.0
    return settings.send_share * provider.default_rate
