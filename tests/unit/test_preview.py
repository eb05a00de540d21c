"""``receipts preview``: the receipt of an event file, with the configured templates, no DB."""

from __future__ import annotations

import email
import email.policy
import json
from pathlib import Path

import pytest

from receipts.cli import main
from tests.pdf_text import text_of
from tests.receipt_examples import EXAMPLES, example

# No DATABASE_URL: preview must not need one.
ENVIRON = {"EMAIL_FROM": "Acme Billing <billing@acme.example>"}


def preview(
    args: list[str], capsys: pytest.CaptureFixture[str], **environ: str
) -> tuple[int, str, str]:
    code = main(["preview", *args], {**ENVIRON, **environ})
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_text_is_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    """The text part, exactly as it would be stored."""
    code, out, _ = preview([str(EXAMPLES / "invoice_paid_credit_balance.json")], capsys)
    assert code == 0
    assert out.startswith("Hello Sam Okafor,\n")
    assert "$4.00 from your credit balance, $6.00 charged" in out


def test_html_in_another_locale(capsys: pytest.CaptureFixture[str]) -> None:
    """--locale renders in that language and its formats."""
    path = str(EXAMPLES / "invoice_paid_jpy.json")
    code, out, _ = preview([path, "--format", "html", "--locale", "ja_JP"], capsys)
    assert code == 0 and out.startswith("<!doctype html>") and '<html lang="ja">' in out
    assert "￥40,400" in out and "お支払い金額" in out


def test_eml_is_a_whole_message_with_both_parts(capsys: pytest.CaptureFixture[str]) -> None:
    """The .eml a mail client can open: From, To, Subject, a text and an HTML part."""
    code, out, _ = preview([str(EXAMPLES / "invoice_paid.json"), "--format", "eml"], capsys)
    assert code == 0
    message = email.message_from_string(out, policy=email.policy.default)
    assert message["From"] == "Acme Billing <billing@acme.example>"
    assert message["To"] == "jenny.rosen@example.com"
    assert message["Subject"] == "Receipt from Acme Tools, Inc. for invoice ACME-0042"
    text = message.get_body(("plain",))
    html = message.get_body(("html",))
    assert text is not None and "Amount paid: $49.00" in text.get_content()
    assert html is not None and "$49.00" in html.get_content()


def test_pdf_is_written_to_the_output_file_in_the_receipts_language(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--format pdf: the PDF RECEIPTS_ATTACH_PDF would attach, written to --output."""
    target = tmp_path / "receipt.pdf"
    path = str(EXAMPLES / "invoice_paid_jpy.json")
    code, out, err = preview(
        [path, "--format", "pdf", "--locale", "ja_JP", "--output", str(target)], capsys
    )
    assert code == 0 and out == "" and str(target) in err
    pdf = target.read_bytes()
    assert pdf.startswith(b"%PDF-")
    text = text_of(pdf)
    assert "お支払い金額" in text and "40,400" in text


def test_pdf_is_not_written_to_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    code, out, err = preview([str(EXAMPLES / "invoice_paid.json"), "--format", "pdf"], capsys)
    assert code == 1 and out == ""
    assert "--format pdf writes a binary file: give --output FILE" in err


def test_an_eml_carries_the_pdf_when_receipts_attach_pdf_is_true(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = preview(
        [str(EXAMPLES / "invoice_paid.json"), "--format", "eml"],
        capsys,
        RECEIPTS_ATTACH_PDF="true",
    )
    assert code == 0
    message = email.message_from_string(out, policy=email.policy.default)
    [attached] = message.iter_attachments()
    assert attached.get_filename() == "receipt-ACME-0042.pdf"
    assert attached.get_content().startswith(b"%PDF-")


def test_stdin_and_the_configured_templates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A team checks its own template before a deploy; - reads the event from stdin."""
    folder = tmp_path / "invoice_paid"
    folder.mkdir()
    (folder / "body.txt").write_text("Paid {{ receipt.amount_paid }} to {{ receipt.merchant }}")
    monkeypatch.setattr("sys.stdin", _Stdin(json.dumps(example("invoice_paid")).encode()))
    code, out, _ = preview(["-"], capsys, RECEIPTS_TEMPLATE_DIR=str(tmp_path))
    assert (code, out) == (0, "Paid $49.00 to Acme Tools, Inc.\n")


def test_a_broken_template_is_reported_like_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "invoice_paid"
    folder.mkdir()
    (folder / "subject.txt").write_text("{{ receipt.number ")
    code, _, err = preview(
        [str(EXAMPLES / "invoice_paid.json")], capsys, RECEIPTS_TEMPLATE_DIR=str(tmp_path)
    )
    assert code == 2
    assert "RECEIPTS_TEMPLATE_DIR: invoice_paid/subject.txt line 1" in err


def test_events_that_give_no_email_say_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 1 with the reason: another event type, a review reason, a file that is not JSON."""
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**example("invoice_paid"), "type": "invoice.created"}))
    assert (
        preview([str(other)], capsys)[2] == "receipts preview: no receipt: event_type_not_handled\n"
    )
    review = example("invoice_paid")
    review["data"]["object"]["customer_email"] = None
    other.write_text(json.dumps(review))
    code, _, err = preview([str(other)], capsys)
    assert (code, err) == (1, "receipts preview: needs review: missing_customer_email\n")
    other.write_text("{not json")
    assert preview([str(other)], capsys)[0] == 1
    assert preview([str(tmp_path / "missing.json")], capsys)[0] == 1


def test_an_unknown_locale_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = preview([str(EXAMPLES / "invoice_paid.json"), "--locale", "xx_YY"], capsys)
    assert code == 2 and "--locale: unknown locale 'xx_YY'" in err


class _Stdin:
    def __init__(self, data: bytes) -> None:
        import io

        self.buffer = io.BytesIO(data)


def test_preview_decides_as_the_service_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A zero total is no receipt unless RECEIPTS_SEND_ZERO_VALUE, as in the webhook."""
    zero = str(EXAMPLES / "invoice_paid_zero_value.json")
    assert preview([zero], capsys)[::2] == (1, "receipts preview: no receipt: zero_value\n")
    assert preview([zero], capsys, RECEIPTS_SEND_ZERO_VALUE="true")[0] == 0


def test_a_receipt_that_would_not_add_up_needs_review_with_its_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the worker's first claim would send to review, preview refuses the same way."""
    event = example("invoice_paid_tax_two_discounts")
    event["data"]["object"]["total"] = 24500
    path = tmp_path / "off.json"
    path.write_text(json.dumps(event))
    code, out, err = preview([str(path)], capsys)
    assert (code, out) == (1, "")
    assert err.startswith("receipts preview: needs review: receipt_does_not_add_up: usd: ")
    assert "= 24512, but the total is 24500" in err


def test_a_thin_event_says_what_to_preview_instead(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A thin notification carries no invoice; preview names the invoice to save."""
    thin = tmp_path / "thin.json"
    thin.write_text(
        json.dumps(
            {
                "id": "evt_test_65R",
                "object": "v2.core.event",
                "type": "v1.invoice.paid",
                "related_object": {"id": "in_1Thin", "type": "invoice"},
            }
        )
    )
    code, _, err = preview([str(thin)], capsys)
    assert code == 1 and "stripe invoices retrieve in_1Thin > invoice.json" in err
    invoice = tmp_path / "invoice.json"
    invoice.write_text(json.dumps(example("invoice_paid")["data"]["object"]))
    code, out, _ = preview([str(invoice)], capsys)
    assert code == 0 and "Amount paid: $49.00" in out


def test_a_refund_and_a_credit_note_from_the_samples(capsys: pytest.CaptureFixture[str]) -> None:
    """--kind without a file renders the built-in sample, with the configured sender."""
    code, out, _ = preview(["--kind", "refund"], capsys)
    assert code == 0
    assert "partial refund of $49.00 of the $98.00 you paid for invoice SAMPLE-0001" in out
    code, out, _ = preview(["--kind", "credit-note", "--format", "eml"], capsys)
    message = email.message_from_string(out, policy=email.policy.default)
    assert code == 0 and message["From"] == "Acme Billing <billing@acme.example>"
    assert str(message["Subject"]).strip().startswith("Credit note SAMPLE-0001-CN-01 from Sample")


def test_a_refund_from_a_stored_render_input(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(EXAMPLES / "render_input" / "refund_full_sepa.json")
    code, out, _ = preview(["--kind", "refund", path, "--format", "html"], capsys)
    assert code == 0 and '<html lang="de">' in out and "49,00" in out


def test_a_credit_note_that_would_not_add_up_needs_review(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(
        (EXAMPLES / "render_input" / "credit_note_with_refund.json").read_text("utf-8")
    )
    document["credit_note"]["subtotal"] = 3000
    path = tmp_path / "off.json"
    path.write_text(json.dumps(document))
    code, out, err = preview(["--kind", "credit-note", str(path)], capsys)
    assert (code, out) == (1, "")
    assert err.startswith("receipts preview: needs review: receipt_does_not_add_up: usd: lines")
    code, _, err = preview(["--kind", "refund", str(path)], capsys)
    assert (code, err.strip()) == (1, f"receipts preview: {path}: not the render input of a refund")


def test_a_refund_receipts_pdf_is_written_and_a_credit_note_has_none(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--kind refund --format pdf: the refund receipt's PDF, in the customer's language."""
    target = tmp_path / "refund.pdf"
    path = str(EXAMPLES / "render_input" / "refund_full_sepa.json")
    code, out, err = preview(
        ["--kind", "refund", path, "--format", "pdf", "--output", str(target)], capsys
    )
    assert code == 0 and out == "" and str(target) in err
    assert "Rückerstattung" in text_of(target.read_bytes())
    code, _, err = preview(["--kind", "credit-note", "--format", "pdf"], capsys)
    assert code == 1 and "links Stripe's own PDF" in err
