"""Settings: read once, every problem reported on one line naming the variable."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from receipts.config import WEB_REQUIRES, ConfigError, load_settings

ROOT = Path(__file__).resolve().parents[2]
VALID = {
    "DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/receipts",
    "STRIPE_WEBHOOK_SECRET": "whsec_a",
    "EMAIL_FROM": "billing@example.com",
}


def test_defaults_follow_the_design() -> None:
    settings = load_settings(VALID, required=WEB_REQUIRES)
    assert settings.resend_api_url == "https://api.resend.com"
    assert settings.retry_cutoff_hours == 23.0
    assert settings.max_attempts == 10
    assert settings.provider_timeout <= 10.0
    assert settings.send_rate is None  # the provider's own default: Resend's 5/s
    assert settings.batch_size == 1  # one request per receipt unless batches are asked for
    assert settings.send_share == 0.6  # all workers together: 3 of Resend's 5 requests/s
    assert load_settings({**VALID, "RECEIPTS_BATCH_SIZE": "100"}).batch_size == 100


def test_the_send_rate_defaults_to_resends_documented_team_rate(tmp_path: Path) -> None:
    """Unset: Resend's 5 requests/s (the .eml sink: no cap); 0 still means no cap."""
    from receipts.delivery.configured import send_rate
    from receipts.delivery.providers.file_sink import FileSinkProvider
    from receipts.delivery.providers.resend import ResendProvider

    resend = ResendProvider(api_url="https://api.resend.com", api_key="re_x",
                            connect_timeout=1, read_timeout=1)  # fmt: skip
    sink = FileSinkProvider(tmp_path)
    assert send_rate(load_settings(VALID), resend) == 5.0
    assert send_rate(load_settings(VALID), sink) == 0.0
    assert send_rate(load_settings({**VALID, "RECEIPTS_SEND_RATE": "0"}), resend) == 0.0
    assert send_rate(load_settings({**VALID, "RECEIPTS_SEND_RATE": "2.5"}), resend) == 2.5


@pytest.mark.parametrize(
    "key", ["sk_live_abc", "re_", "re_k\u00e9y", "re_abc def", '"re_abc"', "re_abc\u2028", "RE_abc"]
)
def test_a_resend_api_key_that_is_not_a_key_stops_start_up_naming_the_variable(key: str) -> None:
    """Not re_… in printable ASCII (a non-Latin-1 character would fail inside every
    send): one line naming RESEND_API_KEY, and the key itself is not repeated."""
    key = key.encode().decode("unicode_escape")
    with pytest.raises(ConfigError) as raised:
        load_settings({**VALID, "RESEND_API_KEY": key})
    message = str(raised.value)
    assert message.startswith("RESEND_API_KEY: ") and "\n" not in message
    assert len(key) < 5 or key not in message


def test_a_resend_api_key_of_the_documented_shape_is_accepted() -> None:
    """re_ followed by letters, digits and underscores, as Resend issues them."""
    settings = load_settings({**VALID, "RESEND_API_KEY": "re_123456789_AbCdEf"})
    assert settings.resend_api_key == "re_123456789_AbCdEf"


@pytest.mark.parametrize(
    ("value", "address"),
    [("9100", ("127.0.0.1", 9100)), ("0.0.0.0:9100", ("0.0.0.0", 9100)),
     ("[::1]:9100", ("::1", 9100))],
)  # fmt: skip
def test_the_private_metrics_port_defaults_to_loopback(
    value: str, address: tuple[str, int]
) -> None:
    """RECEIPTS_METRICS_PORT is a port on 127.0.0.1, unless a host is given."""
    settings = load_settings({**VALID, "RECEIPTS_METRICS_PORT": value})
    assert (settings.metrics_host, settings.metrics_port) == address


def test_several_webhook_secrets_are_comma_separated() -> None:
    settings = load_settings({**VALID, "STRIPE_WEBHOOK_SECRET": "whsec_a, whsec_b,"})
    assert settings.stripe_webhook_secrets == ("whsec_a", "whsec_b")


@pytest.mark.parametrize("variable", WEB_REQUIRES)
def test_missing_required_setting_names_the_variable(variable: str) -> None:
    environ = {k: v for k, v in VALID.items() if k != variable}
    with pytest.raises(ConfigError, match=f"^{variable}: is required"):
        load_settings(environ, required=WEB_REQUIRES)


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        ("DATABASE_URL", "mysql://x", "postgresql://"),
        ("STRIPE_WEBHOOK_SECRET", "whsec_a,sk_live_b", "secret #2"),
        ("EMAIL_FROM", "billing", "email address"),
        ("RESEND_API_URL", "ftp://x", "http"),
        ("RECEIPTS_SEND_RATE", "fast", "number"),
        ("RECEIPTS_SEND_RATE", "-1", "at least"),
        ("RECEIPTS_SEND_RATE", "nan", "finite number"),
        ("RECEIPTS_PROVIDER_TIMEOUT", "-inf", "finite number"),
        ("RECEIPTS_SEND_SHARE", "0", "at least 0.01"),
        ("RECEIPTS_SEND_SHARE", "1.5", "at most 1"),
        ("RECEIPTS_SEND_SHARE", "nan", "finite number"),
        ("RECEIPTS_BATCH_SIZE", "0", "at least 1"),
        ("RECEIPTS_BATCH_SIZE", "101", "at most 100"),
        ("RECEIPTS_BATCH_SIZE", "2.5", "whole number"),
        ("RECEIPTS_BATCH_SIZE", "many", "number"),
        ("RECEIPTS_RETRY_CUTOFF_HOURS", "24", "below the provider's 24 h"),
        ("RECEIPTS_PROVIDER_TIMEOUT", "30", "at most 10"),
        ("RECEIPTS_SEND_ZERO_VALUE", "maybe", "true or false"),
        ("RECEIPTS_ATTACH_PDF", "pdf", "true or false"),
        ("RECEIPTS_LOCALE", "xx_NOPE", "unknown locale"),
        ("LOG_FORMAT", "xml", "one of"),
        ("RECEIPTS_METRICS_PORT", "nine", "a port"),
        ("RECEIPTS_METRICS_PORT", "0.0.0.0:70000", "a port"),
        ("RECEIPTS_BODY_TIMEOUT", "0", "at least"),
        ("RECEIPTS_STATEMENT_TIMEOUT", "600", "at most 60"),
        ("RECEIPTS_MERCHANT_NAME", "Acme\u202e moc.live", "control characters"),
        ("RECEIPTS_MERCHANT_NAME", "A" * 101, "at most 100"),
        ("RECEIPTS_SUPPORT_EMAIL", "Help <help@acme.example>", "email address"),
        ("RECEIPTS_SUPPORT_EMAIL", "help", "email address"),
        ("RECEIPTS_SUPPORT_URL", "http://acme.example/help", "https://"),
        ("RECEIPTS_SUPPORT_URL", "https://acme.example/a b", "https://"),
        ("RECEIPTS_SUPPORT_URL", "https://user@acme.example/", "https://"),
        ("DATABASE_URL", "postgresql://u:p@[::1/receipts", "Invalid IPv6 URL"),
        ("DATABASE_URL", "postgresql://u:p@db.example:abc/receipts", "integer"),
        ("RECEIPTS_TIMEZONE", "A" * 5000, "unknown time zone 'AAAA"),
        ("RESEND_WEBHOOK_SECRET", "whsec_abc", "not base64"),
        ("RESEND_WEBHOOK_SECRET", "whsec_YWJj", "too short"),
        ("RESEND_WEBHOOK_SECRET", "c2VjcmV0LXNlY3JldC1zZWNyZXQ=", "must start with 'whsec_'"),
    ],
)
def test_malformed_setting_names_the_variable_and_problem(
    variable: str, value: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings({**VALID, variable: value})
    message = str(raised.value)
    assert message.startswith(f"{variable}: ") and problem in message
    assert "\n" not in message and len(message) < 300
    assert ":p@" not in message  # a URL's password is never repeated


def test_gunicorn_refuses_to_start_with_a_bad_setting() -> None:
    """The web process stops (it does not restart workers forever), names the variable
    and leaves no metrics folder behind in the temp folder."""
    environ = {k: v for k, v in VALID.items() if k != "EMAIL_FROM"}
    environ["PATH"] = str(Path(sys.executable).parent)
    environ["TMPDIR"] = tempfile.gettempdir()  # this test's own (tests/conftest.py)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "gunicorn"), "wsgi:app", "--bind", "127.0.0.1:0"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # gunicorn.conf.py preloads the app: the arbiter itself stops, no worker is forked.
    assert result.returncode == 3
    assert "Booting worker" not in result.stderr
    assert "receipts: configuration error: EMAIL_FROM: is required but not set" in result.stderr
    assert list(Path(environ["TMPDIR"]).iterdir()) == []


@pytest.mark.parametrize("variable", ["EMAIL_FROM", "RECEIPTS_REPLY_TO"])
@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("Billing <billing@example.com>\r\nBcc: everyone@example.com", "one line"),
        ("Billing <billing@example.com>\nBcc: everyone@example.com", "one line"),
        ("Acme, Inc <billing@example.com>", "quote a display name that has a comma"),
        ("billing@example.com, other@example.com", "exactly one address"),
        ("Billing <=?utf-8?q?evil=40evil.example=2C?=@example.com>", "not an email address"),
        ("Billing <billing@[example.com>", "not an email address"),
    ],
)
def test_a_sender_address_is_one_mailbox_on_one_line(
    variable: str, value: str, problem: str
) -> None:
    """A line break, an unquoted comma or a second address in EMAIL_FROM or
    RECEIPTS_REPLY_TO is refused with one line naming the variable."""
    with pytest.raises(ConfigError) as raised:
        load_settings({**VALID, variable: value})
    message = str(raised.value)
    assert message.startswith(f"{variable}: ") and problem in message
    assert "\n" not in message and "\r" not in message


def test_a_sender_display_name_is_kept_and_quoted_as_a_header_needs() -> None:
    """A quoted name with a comma is accepted; a name with a period is written quoted."""
    settings = load_settings(
        {
            **VALID,
            "EMAIL_FROM": '"Acme, Inc" <billing@example.com>',
            "RECEIPTS_REPLY_TO": "Acme Inc. Support <help@example.com>",
        }
    )
    assert settings.email_from == '"Acme, Inc" <billing@example.com>'
    assert settings.reply_to == '"Acme Inc. Support" <help@example.com>'


def test_the_receipt_says_who_was_paid_and_where_to_ask() -> None:
    """RECEIPTS_MERCHANT_NAME, RECEIPTS_SUPPORT_EMAIL, RECEIPTS_SUPPORT_URL, each optional."""
    settings = load_settings(
        {
            **VALID,
            "RECEIPTS_MERCHANT_NAME": " Acme Tools, Inc. ",
            "RECEIPTS_SUPPORT_EMAIL": "help@acme.example",
            "RECEIPTS_SUPPORT_URL": "https://acme.example/help?from=receipt",
        }
    )
    assert settings.merchant_name == "Acme Tools, Inc."
    assert settings.support_email == "help@acme.example"
    assert settings.support_url == "https://acme.example/help?from=receipt"
    unset = load_settings(VALID)
    assert (unset.merchant_name, unset.support_email, unset.support_url) == (None, None, None)
