"""Reading single environment variables, each checked, every error naming its variable."""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from receipts.addresses import AddressError, formatted_mailbox, is_email_address

# Resend remembers an idempotency key for 24 hours; a cutoff at or past that
# could retry a send the provider has forgotten, which is the one duplicate
# the product promises never to create on its own.
PROVIDER_KEY_RETENTION_HOURS = 24.0

_STRIPE_KEY_PREFIXES = ("rk_live_", "rk_test_", "sk_live_", "sk_test_")
# What a receipt may print as the merchant's name or a link: one line, no controls.
_DISPLAY_TEXT = re.compile(r"[^\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]{1,100}")
_URL_TEXT = re.compile(r"[!-~]{1,2048}")
# Resend's keys: "re_" and letters, digits, "_" (e.g. re_123456789); any other
# printable ASCII character but quotes and the backslash is let through.
_RESEND_KEY = re.compile(r"re_[!#-&(-\[\]-~]{1,500}")
_TOKEN = re.compile(r"[!#-&(-\[\]-~]{1,500}")


@dataclass(frozen=True, kw_only=True)
class SmtpTarget:
    """Where ``SMTP_URL`` says to send: ``smtp://user:pass@host:port?starttls=true`` or
    ``smtps://…`` (TLS from the first byte). The password never appears in a repr."""

    host: str
    port: int
    implicit_tls: bool = False
    starttls: bool = False
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def netloc(self) -> str:
        """``host:port`` as a URL writes it: an IPv6 address in brackets (RFC 3986)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def where(self) -> str:
        """``smtp://host:port`` (and how it is secured), never the credentials."""
        scheme = "smtps" if self.implicit_tls else "smtp"
        security = " with STARTTLS" if self.starttls else ""
        login = f" as {self.username}" if self.username else ""
        return f"{scheme}://{self.netloc}{security}{login}"


_SMTP_DEFAULT_PORTS = {"smtp": 25, "smtps": 465}


class ConfigError(Exception):
    """A setting is missing or malformed; the message names the variable."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}")
        self.variable = variable


class EnvironmentReader:
    """Reads and validates single variables; every error names its variable."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ

    def text(self, name: str) -> str | None:
        value = self._environ.get(name, "").strip()
        return value or None

    def database_url(self, name: str) -> str | None:
        value = self.text(name)
        if value is None:
            return None
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 (reading it checks it)
        except ValueError as bad:
            # "Invalid IPv6 URL", "Port could not be cast to integer value as 'abc'"
            raise ConfigError(name, f"is not a usable URL: {bad}") from None
        if parts.scheme not in ("postgres", "postgresql"):
            raise ConfigError(name, "must be a postgresql:// URL")
        return value

    def secrets(self, name: str, *, prefix: str) -> tuple[str, ...]:
        value = self.text(name)
        if value is None:
            if name in self._environ:
                # `export STRIPE_WEBHOOK_SECRET=$(stripe listen --print-secret)` sets it
                # to nothing when the CLI is not logged in; every signature would fail.
                raise ConfigError(
                    name,
                    "is set but empty (`stripe listen --print-secret` prints nothing "
                    "until `stripe login` succeeds): set a secret or unset the variable",
                )
            return ()
        secrets = tuple(part.strip() for part in value.split(",") if part.strip())
        if not secrets:
            raise ConfigError(name, "names no secret (only commas)")
        for position, secret in enumerate(secrets, start=1):
            if not secret.startswith(prefix):
                raise ConfigError(name, f"secret #{position} does not start with {prefix!r}")
        return secrets

    def signing_secret(self, name: str) -> str | None:
        """A Standard Webhooks (Svix) signing secret: ``whsec_`` and base64 of at least
        16 bytes. A garbled one would start fine and refuse every delivery webhook."""
        value = self.text(name)
        if value is None:
            return None
        encoded = value.removeprefix("whsec_")
        if encoded == value:
            raise ConfigError(name, "must start with 'whsec_' (the signing secret Resend shows)")
        try:
            key = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(
                name, "is not a whsec_… secret: what follows whsec_ is not base64"
            ) from None
        if len(key) < 16:
            raise ConfigError(
                name, f"is too short for a signing secret ({len(key)} bytes; Resend's are 24+)"
            )
        return value

    def stripe_key(self, name: str) -> str | None:
        value = self.text(name)
        if value is not None and not value.startswith(_STRIPE_KEY_PREFIXES):
            raise ConfigError(name, "must be a restricted (rk_…) or secret (sk_…) Stripe key")
        return value

    def resend_key(self, name: str) -> str | None:
        """A Resend API key looks like ``re_…`` in printable ASCII: anything else
        (a pasted quote, a non-Latin-1 character) would fail every send, so it
        stops the process here. The key itself is never printed."""
        value = self.text(name)
        if value is None:
            return None
        if not _RESEND_KEY.fullmatch(value):
            raise ConfigError(
                name,
                "must be a Resend API key: re_ followed by printable ASCII characters "
                "(no spaces or quotes)",
            )
        return value

    def smtp_target(self, name: str) -> SmtpTarget | None:
        """``SMTP_URL``: smtp:// or smtps://, a host, optional port, user and password
        (percent-encoded), and ``?starttls=true`` for STARTTLS on a plain connection."""
        value = self.text(name)
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in _SMTP_DEFAULT_PORTS:
            raise ConfigError(name, "must be an smtp:// or smtps:// URL")
        try:
            port = parts.port or _SMTP_DEFAULT_PORTS[parts.scheme]
        except ValueError:
            raise ConfigError(name, "has a port that is not a number from 1 to 65535") from None
        if not parts.hostname:
            raise ConfigError(name, "names no host (smtp://host:port)")
        starttls = self._starttls(name, parts.query)
        if starttls and parts.scheme == "smtps":
            raise ConfigError(name, "smtps:// is TLS already; starttls=true is for smtp://")
        return SmtpTarget(
            host=parts.hostname,
            port=port,
            implicit_tls=parts.scheme == "smtps",
            starttls=starttls,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
        )

    @staticmethod
    def _starttls(name: str, query: str) -> bool:
        options = parse_qs(query, keep_blank_values=True)
        unknown = sorted(set(options) - {"starttls"})
        if unknown:
            raise ConfigError(name, f"has an unknown option {unknown[0]!r} (only starttls)")
        raw = (options.get("starttls") or ["false"])[-1].lower()
        if raw not in ("true", "false", "1", "0", "yes", "no"):
            raise ConfigError(name, f"starttls must be true or false, got {raw!r}")
        return raw in ("true", "1", "yes")

    def address(self, name: str) -> str | None:
        """One mailbox, as a header writes it; the error says why it is not one."""
        value = self.text(name)
        if value is None:
            return None
        try:
            return formatted_mailbox(value)
        except AddressError as problem:
            raise ConfigError(
                name, f"{problem}; expected 'a@b.example' or 'Name <a@b.example>'"
            ) from None

    def display_name(self, name: str) -> str | None:
        """A name a receipt shows as written: one line of at most 100 characters."""
        value = self.text(name)
        if value is not None and not _DISPLAY_TEXT.fullmatch(value):
            raise ConfigError(
                name, "must be one line of at most 100 characters, without control characters"
            )
        return value

    def bare_address(self, name: str) -> str | None:
        """One address without a display name (``help@shop.example``), as a receipt prints it."""
        value = self.text(name)
        if value is not None and not is_email_address(value):
            raise ConfigError(
                name, f"must be an email address like help@shop.example, got {value!r}"
            )
        return value

    def public_url(self, name: str) -> str | None:
        """An https:// link a customer can open: printable ASCII, a host, no user info."""
        value = self.text(name)
        if value is None:
            return None
        parts = urlsplit(value) if _URL_TEXT.fullmatch(value) else None
        if (
            parts is None
            or parts.scheme != "https"
            or not parts.hostname
            or parts.username is not None
            or "\\" in value
        ):
            raise ConfigError(name, "must be an https:// link (printable ASCII, no spaces)")
        return value

    def http_url(self, name: str, default: str) -> str:
        value = self.text(name) or default
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(name, "must be an http(s) URL")
        return value.rstrip("/")

    def number(
        self,
        name: str,
        default: float,
        *,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> float:
        raw = self.text(name)
        if raw is None:
            return float(default)
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(name, f"must be a number, got {raw!r}") from None
        if not math.isfinite(value):
            raise ConfigError(name, f"must be a finite number, got {raw!r}")
        if minimum is not None and value < minimum:
            raise ConfigError(name, f"must be at least {minimum:g}, got {raw}")
        if maximum is not None and value > maximum:
            raise ConfigError(name, f"must be at most {maximum:g}, got {raw}")
        return value

    def whole_number(self, name: str, default: int, *, minimum: int, maximum: int) -> int:
        """A whole number within [minimum, maximum]; ``2.5`` is refused, not rounded."""
        raw = self.text(name)
        if raw is None:
            return default
        value = self.number(name, default, minimum=minimum, maximum=maximum)
        if not value.is_integer():
            raise ConfigError(name, f"must be a whole number, got {raw!r}")
        return int(value)

    def optional_number(self, name: str, *, minimum: float) -> float | None:
        """A number, or None when unset (the caller's default then applies)."""
        if self.text(name) is None:
            return None
        return self.number(name, 0.0, minimum=minimum)

    def retry_cutoff(
        self,
        name: str,
        default: float,
        *,
        below: float | None = PROVIDER_KEY_RETENTION_HOURS,
        window: str = "idempotency window",
    ) -> float:
        """Hours after the first attempt with no more automatic sends: strictly below
        ``below`` (how long the provider can still tell an accepted send), if any."""
        hours = self.number(name, default, minimum=0.01)
        if below is not None and hours >= below:
            raise ConfigError(
                name, f"must stay below the provider's {below:g} h {window}, got {hours:g}"
            )
        return hours

    def flag(self, name: str, default: bool) -> bool:
        raw = self.text(name)
        if raw is None:
            return default
        lowered = raw.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(name, f"must be true or false, got {raw!r}")

    def modes(self, name: str) -> frozenset[str]:
        """``live,test`` (the default), ``live`` or ``test``: the Stripe modes emailed."""
        raw = self.text(name)
        if raw is None:
            return frozenset({"live", "test"})
        modes = frozenset(part.strip().lower() for part in raw.split(","))
        if not modes or not modes <= {"live", "test"}:
            raise ConfigError(name, f"must be live, test or live,test, got {raw!r}")
        return modes

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        raw = self.text(name)
        if raw is None:
            return default
        if raw not in choices:
            raise ConfigError(name, f"must be one of {', '.join(choices)}, got {raw!r}")
        return raw

    def optional_choice(self, name: str, choices: tuple[str, ...]) -> str | None:
        raw = self.text(name)
        if raw is None:
            return None
        if raw.lower() not in choices:
            raise ConfigError(name, f"must be one of {', '.join(choices)}, got {raw!r}")
        return raw.lower()

    def token(self, name: str) -> str | None:
        """An API token: printable ASCII without spaces or quotes (never printed)."""
        value = self.text(name)
        if value is not None and not _TOKEN.fullmatch(value):
            raise ConfigError(name, "must be printable ASCII characters (no spaces or quotes)")
        return value

    def path(self, name: str) -> Path | None:
        raw = self.text(name)
        return Path(raw) if raw else None

    def directory(self, name: str) -> Path | None:
        path = self.path(name)
        if path is not None and not path.is_dir():
            raise ConfigError(name, f"{path} is not a directory")
        return path

    def timezone(self, name: str, default: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        raw = self.text(name) or default
        shown = raw if len(raw) <= 60 else raw[:60] + "…"
        try:
            ZoneInfo(raw)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            # OSError: a name longer than a file name may be ("File name too long")
            raise ConfigError(
                name, f"unknown time zone {shown!r} (an IANA name: Europe/Berlin)"
            ) from None
        return raw

    def locale(self, name: str, default: str) -> str:
        from babel import Locale, UnknownLocaleError

        raw = self.text(name) or default
        try:
            Locale.parse(raw)
        except (ValueError, UnknownLocaleError):
            raise ConfigError(name, f"unknown locale {raw!r}") from None
        return raw
