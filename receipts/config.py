"""Settings, read once from the environment into one frozen object.

Every process calls :func:`load_settings` at start-up with the names it cannot
run without. A missing or malformed value raises :class:`ConfigError`, whose
message is one line naming the variable; the entry points print it and exit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from receipts import console_users
from receipts.console_users import ConsoleUser
from receipts.environment import PROVIDER_KEY_RETENTION_HOURS as PROVIDER_KEY_RETENTION_HOURS
from receipts.environment import ConfigError as ConfigError
from receipts.environment import EnvironmentReader
from receipts.environment import SmtpTarget as SmtpTarget

PROVIDERS = ("resend", "postmark", "smtp")
# Postmark keeps messages (and so can find them by metadata) this many days by
# default; its Retention Add-on sets 7 to 365.
POSTMARK_RETENTION_DAYS = 45.0
# How long after Postmark accepted a message its outbound search is trusted to
# show it. Postmark documents no figure; a minute is well past what is seen.
POSTMARK_SEARCH_LAG_SECONDS = 60.0
# The most emails Resend's POST /emails/batch takes in one request.
MAX_BATCH_SIZE = 100


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything the service reads from its environment."""

    database_url: str | None = None
    stripe_webhook_secrets: tuple[str, ...] = ()
    email_from: str | None = None
    reply_to: str | None = None
    resend_api_key: str | None = None
    resend_api_url: str = "https://api.resend.com"
    resend_webhook_secret: str | None = None
    # RECEIPTS_PROVIDER: resend | postmark | smtp; None: Resend when RESEND_API_KEY
    # is set, else the .eml sink when RECEIPTS_MAIL_DIR is (receipts dev).
    provider: str | None = None
    postmark_server_token: str | None = None
    postmark_api_url: str = "https://api.postmarkapp.com"
    postmark_message_stream: str = "outbound"
    postmark_retention_days: float = POSTMARK_RETENTION_DAYS
    postmark_search_lag_seconds: float = POSTMARK_SEARCH_LAG_SECONDS
    smtp: SmtpTarget | None = None
    stripe_api_key: str | None = None
    stripe_api_base: str = "https://api.stripe.com"
    # Provider requests per second per worker process; None: the provider's
    # documented default (Resend: 5/s per team), 0: no cap.
    send_rate: float | None = None
    # RECEIPTS_SEND_SHARE: the part of the provider's team limit every worker process
    # together may use (the app's own mail keeps the rest); receipts.delivery.fleet_pace.
    send_share: float = 0.6
    # RECEIPTS_BATCH_SIZE: receipts per provider request (1: one request each);
    # above 1, Resend's batch endpoint under the batch's own Idempotency-Key.
    batch_size: int = 1
    provider_timeout: float = 10.0
    provider_connect_timeout: float = 5.0
    send_zero_value: bool = False
    # RECEIPTS_MODES: which Stripe modes' events are emailed; the other mode's are
    # recorded as ignored (test_mode_off / live_mode_off).
    modes: frozenset[str] = frozenset({"live", "test"})
    # Who the receipt is from when the invoice has no account_name, and where to ask.
    merchant_name: str | None = None
    support_email: str | None = None
    support_url: str | None = None
    # RECEIPTS_COPY_TO: the books' address; each receipt and refund receipt gets
    # its own outbox row to it (purpose …-copy), sent independently.
    copy_to: str | None = None
    template_dir: Path | None = None
    # RECEIPTS_ATTACH_PDF: the receipt also goes as receipt-<invoice number>.pdf, a refund
    # receipt as refund-<invoice number>.pdf
    attach_pdf: bool = False
    locale: str = "en_US"
    timezone: str = "UTC"
    max_body_bytes: int = 1024 * 1024
    body_timeout: float = 5.0  # seconds a client may take to send a webhook's whole body
    retry_cutoff_hours: float = 23.0
    max_attempts: int = 10
    lease_seconds: int = 120
    retry_base_seconds: float = 15.0
    retry_max_seconds: float = 3600.0
    mail_dir: Path | None = None
    dev_dir: Path | None = None
    max_pending_age: float = 900.0  # seconds; `receipts status` fails past this
    metrics_enabled: bool = True
    metrics_token: str | None = None
    metrics_port: int | None = None  # a private port serving /metrics without a token
    metrics_host: str = "127.0.0.1"
    log_format: str = "text"
    pool_max_size: int = 8
    database_timeout: float = 5.0
    statement_timeout: float = 5.0  # seconds a webhook's database work may take (locks too)
    # "transaction": DATABASE_URL goes through PgBouncer (or another pooler) in
    # transaction mode: no server-side prepared statements, LISTEN only through
    # database_direct_url. "session": a direct connection, or session pooling.
    database_pooling: str = "session"
    database_direct_url: str | None = None  # bypasses the pooler, for LISTEN
    # Per-process URLs (the Procfile hands them to each process as DATABASE_URL);
    # `receipts doctor` checks each role's privileges through them.
    web_database_url: str | None = None
    worker_database_url: str | None = None
    # The support console (/console/): off unless it has users.
    console_users: tuple[ConsoleUser, ...] = ()
    console_secret: str | None = None  # signs its session cookies
    # The console's own connection: a login role in <prefix>_operator, since it
    # takes review decisions; unset: DATABASE_URL.
    console_database_url: str | None = None
    console_session_hours: float = 8.0
    # Proxies in front of the app that append the client's address to
    # X-Forwarded-For (Heroku's router, Render's: 1); the console throttles
    # failed logins per address.
    console_proxy_hops: int = 0

    @property
    def console_enabled(self) -> bool:
        return bool(self.console_users)

    @property
    def chosen_provider(self) -> str | None:
        """resend | postmark | smtp | file, as the settings choose; None: none is set up."""
        if self.provider is not None:
            return self.provider
        if self.resend_api_key:
            return "resend"
        return "file" if self.mail_dir is not None else None

    @property
    def prepared_statements(self) -> bool:
        """Whether psycopg may prepare statements on the server (not through PgBouncer)."""
        return self.database_pooling != "transaction"


# (environment variable, Settings field) for every value that may be required.
REQUIRABLE = {
    "DATABASE_URL": "database_url",
    "STRIPE_WEBHOOK_SECRET": "stripe_webhook_secrets",
    "EMAIL_FROM": "email_from",
    "RESEND_API_KEY": "resend_api_key",
    "RESEND_WEBHOOK_SECRET": "resend_webhook_secret",
    "STRIPE_API_KEY": "stripe_api_key",
}

WEB_REQUIRES = ("DATABASE_URL", "STRIPE_WEBHOOK_SECRET", "EMAIL_FROM")
WORKER_REQUIRES = ("DATABASE_URL", "RESEND_API_KEY")


def load_settings(environ: Mapping[str, str], *, required: Iterable[str] = ()) -> Settings:
    """Parse every known variable; raise ConfigError for a bad or missing one."""
    reader = EnvironmentReader(environ)
    users = console_users.parse_users(reader.text("RECEIPTS_CONSOLE_USERS"))
    metrics_listen = metrics_address(environ) or ("127.0.0.1", None)
    provider = reader.optional_choice("RECEIPTS_PROVIDER", PROVIDERS)
    retention_days = reader.number(
        "RECEIPTS_POSTMARK_RETENTION_DAYS", POSTMARK_RETENTION_DAYS, minimum=7, maximum=365
    )
    settings = Settings(
        database_url=reader.database_url("DATABASE_URL"),
        stripe_webhook_secrets=reader.secrets("STRIPE_WEBHOOK_SECRET", prefix="whsec_"),
        email_from=reader.address("EMAIL_FROM"),
        reply_to=reader.address("RECEIPTS_REPLY_TO"),
        resend_api_key=reader.resend_key("RESEND_API_KEY"),
        resend_api_url=reader.http_url("RESEND_API_URL", "https://api.resend.com"),
        resend_webhook_secret=reader.signing_secret("RESEND_WEBHOOK_SECRET"),
        provider=provider,
        postmark_server_token=reader.token("POSTMARK_SERVER_TOKEN"),
        postmark_api_url=reader.http_url("POSTMARK_API_URL", "https://api.postmarkapp.com"),
        postmark_message_stream=reader.text("POSTMARK_MESSAGE_STREAM") or "outbound",
        postmark_retention_days=retention_days,
        postmark_search_lag_seconds=reader.number(
            "RECEIPTS_POSTMARK_SEARCH_LAG_SECONDS",
            POSTMARK_SEARCH_LAG_SECONDS,
            minimum=0.0,
            maximum=3600.0,
        ),
        smtp=reader.smtp_target("SMTP_URL"),
        stripe_api_key=reader.stripe_key("STRIPE_API_KEY"),
        stripe_api_base=reader.http_url("STRIPE_API_BASE", "https://api.stripe.com"),
        send_rate=reader.optional_number("RECEIPTS_SEND_RATE", minimum=0.0),
        send_share=reader.number("RECEIPTS_SEND_SHARE", 0.6, minimum=0.01, maximum=1.0),
        batch_size=reader.whole_number("RECEIPTS_BATCH_SIZE", 1, minimum=1, maximum=MAX_BATCH_SIZE),
        provider_timeout=reader.number(
            "RECEIPTS_PROVIDER_TIMEOUT", 10.0, minimum=0.1, maximum=10.0
        ),
        provider_connect_timeout=reader.number(
            "RECEIPTS_PROVIDER_CONNECT_TIMEOUT", 5.0, minimum=0.1, maximum=30.0
        ),
        send_zero_value=reader.flag("RECEIPTS_SEND_ZERO_VALUE", False),
        modes=reader.modes("RECEIPTS_MODES"),
        merchant_name=reader.display_name("RECEIPTS_MERCHANT_NAME"),
        support_email=reader.bare_address("RECEIPTS_SUPPORT_EMAIL"),
        support_url=reader.public_url("RECEIPTS_SUPPORT_URL"),
        copy_to=reader.bare_address("RECEIPTS_COPY_TO"),
        template_dir=reader.directory("RECEIPTS_TEMPLATE_DIR"),
        attach_pdf=reader.flag("RECEIPTS_ATTACH_PDF", False),
        locale=reader.locale("RECEIPTS_LOCALE", "en_US"),
        timezone=reader.timezone("RECEIPTS_TIMEZONE", "UTC"),
        max_body_bytes=int(reader.number("RECEIPTS_MAX_BODY_BYTES", 1024 * 1024, minimum=1024)),
        body_timeout=reader.number("RECEIPTS_BODY_TIMEOUT", 5.0, minimum=0.1, maximum=120.0),
        retry_cutoff_hours=_retry_cutoff(reader, provider, environ, retention_days),
        max_attempts=int(reader.number("RECEIPTS_MAX_ATTEMPTS", 10, minimum=1, maximum=1000)),
        lease_seconds=int(reader.number("RECEIPTS_LEASE_SECONDS", 120, minimum=15)),
        retry_base_seconds=reader.number("RECEIPTS_RETRY_BASE_SECONDS", 15.0, minimum=0.0),
        retry_max_seconds=reader.number("RECEIPTS_RETRY_MAX_SECONDS", 3600.0, minimum=0.0),
        mail_dir=reader.path("RECEIPTS_MAIL_DIR"),
        dev_dir=reader.path("RECEIPTS_DEV_DIR"),
        max_pending_age=reader.number("RECEIPTS_MAX_PENDING_AGE", 900.0, minimum=1.0),
        metrics_enabled=reader.flag("RECEIPTS_METRICS_ENABLED", True),
        metrics_token=reader.text("RECEIPTS_METRICS_TOKEN"),
        metrics_host=metrics_listen[0],
        metrics_port=metrics_listen[1],
        log_format=reader.choice("LOG_FORMAT", ("text", "json"), "text"),
        pool_max_size=int(reader.number("RECEIPTS_POOL_MAX_SIZE", 8, minimum=1, maximum=100)),
        database_timeout=reader.number("RECEIPTS_DATABASE_TIMEOUT", 5.0, minimum=0.1),
        statement_timeout=reader.number(
            "RECEIPTS_STATEMENT_TIMEOUT", 5.0, minimum=0.1, maximum=60.0
        ),
        database_pooling=reader.choice(
            "RECEIPTS_DATABASE_POOLING", ("session", "transaction"), "session"
        ),
        database_direct_url=reader.database_url("DATABASE_DIRECT_URL"),
        web_database_url=reader.database_url("RECEIPTS_WEB_DATABASE_URL"),
        worker_database_url=reader.database_url("RECEIPTS_WORKER_DATABASE_URL"),
        console_users=users,
        console_secret=console_users.secret(reader.text("RECEIPTS_CONSOLE_SECRET"), users),
        console_database_url=reader.database_url("RECEIPTS_CONSOLE_DATABASE_URL"),
        console_session_hours=reader.number(
            "RECEIPTS_CONSOLE_SESSION_HOURS", 8.0, minimum=0.1, maximum=24 * 7
        ),
        console_proxy_hops=int(
            reader.number("RECEIPTS_CONSOLE_PROXY_HOPS", 0, minimum=0, maximum=5)
        ),
    )
    for variable in required:
        if not getattr(settings, REQUIRABLE[variable]):
            raise ConfigError(variable, "is required but not set")
    return settings


def _retry_cutoff(
    reader: EnvironmentReader,
    provider: str | None,
    environ: Mapping[str, str],
    retention_days: float,
) -> float:
    """``RECEIPTS_RETRY_CUTOFF_HOURS``, kept inside what the provider can still tell:
    Resend's 24 h key (default 23 h), Postmark's retention (default a day less);
    SMTP can tell nothing, so only a person's patience bounds it (default 23 h)."""
    name = "RECEIPTS_RETRY_CUTOFF_HOURS"
    chosen = provider or ("resend" if reader.text("RESEND_API_KEY") else None)
    if chosen == "postmark":
        retention = retention_days * 24
        return reader.retry_cutoff(
            name, retention - 24, below=retention, window="message retention"
        )
    if chosen == "smtp":
        return reader.retry_cutoff(name, 23.0, below=None)
    return reader.retry_cutoff(name, 23.0)


def metrics_address(environ: Mapping[str, str]) -> tuple[str, int] | None:
    """``RECEIPTS_METRICS_PORT`` as (host, port): ``9100`` is 127.0.0.1:9100,
    ``0.0.0.0:9100`` any interface; None when unset. gunicorn.conf.py listens there."""
    name = "RECEIPTS_METRICS_PORT"
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    host, _, port = raw.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(name, f"must be a port, or HOST:PORT, got {raw!r}")
    return host.strip("[]") or "127.0.0.1", int(port)
