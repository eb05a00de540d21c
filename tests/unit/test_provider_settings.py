"""RECEIPTS_PROVIDER, the Postmark and SMTP settings, the cutoff each provider allows,
and the ``receipts doctor`` lines for Postmark and SMTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from receipts.config import ConfigError, load_settings
from receipts.delivery.configured import provider_from_settings
from receipts.delivery.providers.postmark import PostmarkProvider
from receipts.delivery.providers.smtp import SmtpProvider
from receipts.operations.provider_checks import mail_provider_checks
from tests.fake_postmark import FakePostmarkClient, running_fake_postmark
from tests.smtp_server import SmtpServer, running_smtp_server


def test_receipts_provider_wins_and_needs_only_its_own_settings() -> None:
    settings = load_settings(
        {"RECEIPTS_PROVIDER": "postmark", "POSTMARK_SERVER_TOKEN": "pm-token",
         "RESEND_API_KEY": "re_unused"}
    )  # fmt: skip
    provider = provider_from_settings(settings, concurrency=1)
    assert isinstance(provider, PostmarkProvider)
    assert provider.guarantee.window_hours == 45 * 24
    smtp = load_settings({"RECEIPTS_PROVIDER": "smtp", "SMTP_URL": "smtp://relay.example:587"})
    assert isinstance(provider_from_settings(smtp, concurrency=1), SmtpProvider)


@pytest.mark.parametrize(
    ("environ", "variable"),
    [
        ({"RECEIPTS_PROVIDER": "postmark"}, "POSTMARK_SERVER_TOKEN"),
        ({"RECEIPTS_PROVIDER": "smtp"}, "SMTP_URL"),
        ({"RECEIPTS_PROVIDER": "resend"}, "RESEND_API_KEY"),
    ],
)
def test_a_chosen_provider_without_its_settings_names_what_is_missing(
    environ: dict[str, str], variable: str
) -> None:
    with pytest.raises(ConfigError, match=variable):
        provider_from_settings(load_settings(environ), concurrency=1)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("sendgrid", "must be one of resend, postmark, smtp"),
    ],
)
def test_an_unknown_provider_is_refused(value: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        load_settings({"RECEIPTS_PROVIDER": value})


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("smtp://relay.example", "smtp://relay.example:25"),
        ("smtp://u%40x:p%3Aw@relay.example:587?starttls=true",
         "smtp://relay.example:587 with STARTTLS as u@x"),
        ("smtps://relay.example", "smtps://relay.example:465"),
    ],
)  # fmt: skip
def test_smtp_url_forms(url: str, where: str) -> None:
    target = load_settings({"SMTP_URL": url}).smtp
    assert target is not None and target.where() == where
    assert "p:w" not in repr(target)  # the password never shows


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://relay.example", "smtp:// or smtps://"),
        ("smtp://", "names no host"),
        ("smtp://relay.example:99999", "port"),
        ("smtp://relay.example?tls=1", "unknown option 'tls'"),
        ("smtp://relay.example?starttls=maybe", "starttls must be true or false"),
        ("smtps://relay.example?starttls=true", "TLS already"),
    ],
)
def test_a_bad_smtp_url_is_refused_naming_it(url: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as raised:
        load_settings({"SMTP_URL": url})
    assert raised.value.variable == "SMTP_URL"


def test_the_retry_cutoff_stays_inside_what_each_provider_can_still_tell() -> None:
    assert load_settings({"RESEND_API_KEY": "re_x"}).retry_cutoff_hours == 23
    with pytest.raises(ConfigError, match="24 h idempotency window"):
        load_settings({"RESEND_API_KEY": "re_x", "RECEIPTS_RETRY_CUTOFF_HOURS": "24"})
    postmark = {"RECEIPTS_PROVIDER": "postmark", "POSTMARK_SERVER_TOKEN": "t"}
    assert load_settings(postmark).retry_cutoff_hours == 44 * 24
    shorter = {**postmark, "RECEIPTS_POSTMARK_RETENTION_DAYS": "7"}
    assert load_settings(shorter).retry_cutoff_hours == 6 * 24
    with pytest.raises(ConfigError, match="168 h message retention"):
        load_settings({**shorter, "RECEIPTS_RETRY_CUTOFF_HOURS": "168"})
    smtp = {"RECEIPTS_PROVIDER": "smtp", "SMTP_URL": "smtp://relay.example"}
    assert load_settings({**smtp, "RECEIPTS_RETRY_CUTOFF_HOURS": "72"}).retry_cutoff_hours == 72


@pytest.fixture
def postmark() -> Iterator[FakePostmarkClient]:
    with running_fake_postmark(token="pm-token") as fake:
        yield fake


def test_doctor_checks_postmarks_token_and_stream(
    postmark: FakePostmarkClient, tmp_path: Path
) -> None:
    environ = {"RECEIPTS_PROVIDER": "postmark", "POSTMARK_SERVER_TOKEN": "pm-token",
               "POSTMARK_API_URL": postmark.url}  # fmt: skip
    checks = mail_provider_checks(load_settings(environ), cache=tmp_path)
    assert [(c.name, c.ok) for c in checks] == [
        ("provider", True), ("postmark-token", True), ("postmark-stream", True)
    ]  # fmt: skip
    assert "searched by message key before any retry" in checks[0].detail
    wrong = mail_provider_checks(
        load_settings({**environ, "POSTMARK_SERVER_TOKEN": "nope"}), cache=tmp_path
    )
    assert [(c.name, c.ok) for c in wrong][1:] == [
        ("postmark-token", False),
        ("postmark-stream", False),
    ]
    assert "refused POSTMARK_SERVER_TOKEN" in wrong[1].detail
    no_stream = mail_provider_checks(
        load_settings({**environ, "POSTMARK_MESSAGE_STREAM": "broadcasts"}), cache=tmp_path
    )
    assert not no_stream[2].ok and "POSTMARK_MESSAGE_STREAM" in no_stream[2].detail


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    with running_smtp_server(username="receipts", password="s3cret") as server:
        yield server


def test_doctor_logs_in_to_the_smtp_server_without_sending(
    smtp: SmtpServer, tmp_path: Path
) -> None:
    good = load_settings({"RECEIPTS_PROVIDER": "smtp", "SMTP_URL": smtp.url("s3cret")})
    provider, login = mail_provider_checks(good, cache=tmp_path)
    assert provider.ok and "ambiguous" not in provider.detail and "review" in provider.detail
    assert login.ok and "EHLO, AUTH as receipts accepted" in login.detail
    bad = load_settings({"RECEIPTS_PROVIDER": "smtp", "SMTP_URL": smtp.url("wrong")})
    _, refused = mail_provider_checks(bad, cache=tmp_path)
    assert not refused.ok and "refused the user name and password" in refused.detail
    assert smtp.messages == []


def test_receipts_dev_smtp_takes_host_and_port_and_tells_doctor() -> None:
    import argparse
    from dataclasses import replace

    from receipts.commands.dev import _chosen_defaults, _mail_note, _smtp_address

    target = _smtp_address("127.0.0.1:1025")
    assert (target.host, target.port, target.username) == ("127.0.0.1", 1025, None)
    for bad in ("1025", "localhost:", "localhost:http", "[::1]:70000"):
        with pytest.raises(argparse.ArgumentTypeError, match="HOST:PORT"):
            _smtp_address(bad)
    settings = replace(load_settings({}), provider="smtp", smtp=target, mail_dir=Path("mail"))
    assert _mail_note(settings, Path("mail")) == "mail       sent by SMTP to smtp://127.0.0.1:1025"
    chosen = _chosen_defaults(settings)
    assert chosen["RECEIPTS_PROVIDER"] == "smtp" and chosen["SMTP_URL"] == "smtp://127.0.0.1:1025"
    assert "RECEIPTS_MAIL_DIR" not in chosen


def test_receipts_dev_smtp_writes_an_ipv6_host_in_brackets_in_its_url() -> None:
    from dataclasses import replace

    from receipts.commands.dev import _chosen_defaults, _mail_note, _smtp_address

    target = _smtp_address("[::1]:1025")
    assert (target.host, target.port) == ("::1", 1025)
    settings = replace(load_settings({}), provider="smtp", smtp=target, mail_dir=Path("mail"))
    url = _chosen_defaults(settings)["SMTP_URL"]
    assert url == "smtp://[::1]:1025"
    # What dev tells doctor reads back as the same host and port.
    assert load_settings({"SMTP_URL": url}).smtp == target
    assert _mail_note(settings, Path("mail")) == "mail       sent by SMTP to smtp://[::1]:1025"
