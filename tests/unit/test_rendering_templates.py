"""Templates a team can own: overridden from a directory, checked whole when the process starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from receipts.config import ConfigError, load_settings
from receipts.delivery.providers.file_sink import FileSinkProvider
from receipts.delivery.worker import run_worker
from receipts.receipt.rendering import Renderer
from receipts.web import create_app
from tests import stripe_events
from tests.receipt_examples import email, example

# The web process starts without a database; nothing here connects to one.
WEB_ENVIRON = {
    "DATABASE_URL": "postgresql://postgres@127.0.0.1:9/receipts",
    "STRIPE_WEBHOOK_SECRET": "whsec_a",
    "EMAIL_FROM": "billing@example.com",
}


def override(directory: Path, name: str, text: str) -> Path:
    folder = directory / "invoice_paid"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text, encoding="utf-8")
    return directory


def test_a_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    """One line: the variable, the template and where in it."""
    override(
        tmp_path, "body.html", "<p>\n{% if receipt.merchant %}\n<b>{{ receipt.merchant }</b>\n"
    )
    with pytest.raises(ConfigError) as raised:
        Renderer(template_dir=tmp_path)
    message = str(raised.value)
    assert message.startswith("RECEIPTS_TEMPLATE_DIR: invoice_paid/body.html line 3: ")
    assert "\n" not in message


def test_a_template_that_cannot_render_fails_at_start_too(tmp_path: Path) -> None:
    """A misspelt variable compiles but cannot render: sample receipts find it, not a webhook."""
    override(tmp_path, "subject.txt", "Paid\n{{ receipt.totl }}")
    with pytest.raises(ConfigError) as raised:
        Renderer(template_dir=tmp_path)
    message = str(raised.value)
    assert message.startswith("RECEIPTS_TEMPLATE_DIR: invoice_paid/subject.txt line 2: ")
    assert "totl" in message


def test_a_template_that_fails_only_for_some_receipts_is_found(tmp_path: Path) -> None:
    """The sample with nothing optional takes templates through their other branches."""
    override(tmp_path, "body.txt", "{% if receipt.merchant %}ok{% else %}{{ nope }}{% endif %}")
    with pytest.raises(ConfigError, match=r"body.txt line 1: UndefinedError"):
        Renderer(template_dir=tmp_path)


@pytest.mark.parametrize(
    "reach",
    [
        "{{ cycler.__init__.__globals__.os.getcwd() }}",
        "{{ receipt.__class__.__mro__ }}",
        "{% set seen = {} %}{{ seen.update(a=1) }}",
    ],
)
def test_a_custom_template_cannot_reach_python_or_change_what_it_reads(
    tmp_path: Path, reach: str
) -> None:
    """Write access to the template folder is not code execution: the sandbox refuses
    internals and mutation, named at start like any template that cannot render."""
    override(tmp_path, "subject.txt", reach)
    with pytest.raises(ConfigError, match=r"invoice_paid/subject.txt line 1: SecurityError"):
        Renderer(template_dir=tmp_path)


def test_a_template_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "invoice_paid"
    folder.mkdir()
    (folder / "body.txt").write_bytes(b"\xff\xfe broken")
    with pytest.raises(ConfigError, match=r"^RECEIPTS_TEMPLATE_DIR: invoice_paid/body.txt: "):
        Renderer(template_dir=tmp_path)


def test_the_worker_refuses_a_broken_template_dir(tmp_path: Path) -> None:
    """The worker renders each email at its first claim, so it builds the renderer
    before it claims anything and cannot start with a broken template."""
    override(tmp_path, "body.html", "{% for line in receipt.lines %}")
    settings = load_settings({**WEB_ENVIRON, "RECEIPTS_TEMPLATE_DIR": str(tmp_path)})
    with pytest.raises(ConfigError, match=r"^RECEIPTS_TEMPLATE_DIR: invoice_paid/body.html line 1"):
        run_worker(settings, FileSinkProvider(tmp_path / "sent"))


def test_receipts_worker_stops_at_start_naming_the_broken_template(tmp_path: Path) -> None:
    """Not a worker sending every receipt to review: a halt with one line."""
    override(tmp_path, "body.txt", "Hello {{ receipt.customer_name\n")
    environ = {
        **WEB_ENVIRON,
        "RECEIPTS_TEMPLATE_DIR": str(tmp_path),
        "RECEIPTS_MAIL_DIR": str(tmp_path / "sent"),
        "PATH": str(Path(sys.executable).parent),
    }
    result = subprocess.run(
        [sys.executable, "-m", "receipts.cli", "worker"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert (
        "receipts: configuration error: RECEIPTS_TEMPLATE_DIR: invoice_paid/body.txt line 1: "
        in result.stderr
    )


def test_the_web_process_starts_without_the_templates(tmp_path: Path) -> None:
    """The webhook stores what the email is made from; a template it never reads
    cannot stop it from taking Stripe's deliveries."""
    override(tmp_path, "body.html", "{% for line in receipt.lines %}")
    settings = load_settings({**WEB_ENVIRON, "RECEIPTS_TEMPLATE_DIR": str(tmp_path)})
    assert create_app(settings) is not None


def test_an_override_written_for_the_one_line_receipt_still_works(tmp_path: Path) -> None:
    """``invoice``, ``amount`` and ``paid_date`` stay for templates older than the itemized one."""
    override(
        tmp_path,
        "body.txt",
        "{{ invoice.customer_name }}: {{ invoice.number }} for {{ amount }} ({{ paid_date }})\n"
        "{{ invoice.hosted_invoice_url }} {{ invoice.invoice_id }} {{ invoice.currency }}",
    )
    event = stripe_events.event(stripe_events.invoice(number="N-7"))
    text = email(event, Renderer(template_dir=tmp_path))["text"]
    assert text.startswith("Jenny Rosen: N-7 for $19.99 (November 30, 2025)\nhttps://")


def test_overrides_can_use_the_catalogs(tmp_path: Path) -> None:
    """``_()`` in a team's template is translated like the packaged ones."""
    override(
        tmp_path, "subject.txt", "{{ _('Receipt for invoice %(number)s', number=receipt.number) }}"
    )
    subject = email(example("invoice_paid"), Renderer(template_dir=tmp_path, locale="de_DE"))
    assert subject["subject"] == "Zahlungsbeleg für Rechnung ACME-0042"


def test_an_unknown_time_zone_or_locale_is_a_configuration_error() -> None:
    """RECEIPTS_TIMEZONE and RECEIPTS_LOCALE are checked when read, with the variable named."""
    with pytest.raises(ConfigError, match=r"^RECEIPTS_TIMEZONE: unknown time zone 'Mars/Olympus'"):
        load_settings({"RECEIPTS_TIMEZONE": "Mars/Olympus"})
    with pytest.raises(ConfigError, match=r"^RECEIPTS_TIMEZONE"):
        Renderer(timezone="../../etc/passwd")
    assert load_settings({"RECEIPTS_TIMEZONE": "Europe/Berlin"}).timezone == "Europe/Berlin"
    assert load_settings({}).timezone == "UTC"
