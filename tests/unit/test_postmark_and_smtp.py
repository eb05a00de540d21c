"""PostmarkProvider against the fake Postmark, SmtpProvider against a real SMTP server,
and the RFC 5322 message both the SMTP send and the ``.eml`` sink write."""

from __future__ import annotations

import base64
import email
import email.policy
import hashlib
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import pytest

from receipts.delivery.providers.message import build_email, message_id
from receipts.delivery.providers.postmark import PostmarkProvider, metadata_for, postmark_body
from receipts.delivery.providers.smtp import SmtpProvider
from receipts.delivery.rules.postmark import reaction_to
from receipts.delivery.rules.smtp import reaction_to as smtp_reaction
from receipts.environment import EnvironmentReader
from tests.fake_postmark import FakePostmarkClient, running_fake_postmark
from tests.smtp_server import SmtpServer, running_smtp_server, self_signed_certificate

KEY = "platform/test/in_1Other/invoice-paid"
TOKEN = "server-token"


def payload(**overrides: object) -> bytes:
    document: dict[str, object] = {
        "from": "Billing <billing@shop.example>",
        "to": ["jenny.rosen@example.com"],
        "subject": "Receipt for invoice ABC-0001",
        "text": "Thanks for your payment.",
        "html": "<p>Thanks for your payment.</p>",
        "reply_to": "support@shop.example",
    }
    document.update(overrides)
    return json.dumps(document).encode()


# The receipt's PDF (RECEIPTS_ATTACH_PDF) as the payload stores it: Resend's shape.
PDF = b"%PDF-1.3\n" + bytes(range(256)) + "領収書".encode()
ATTACHMENT = {
    "filename": "receipt-ABC-0001.pdf",
    "content": base64.b64encode(PDF).decode(),
    "content_type": "application/pdf",
}


@pytest.fixture
def fake() -> Iterator[FakePostmarkClient]:
    with running_fake_postmark(token=TOKEN) as client:
        yield client


def postmark(
    url: str, *, token: str = TOKEN, read_timeout: float = 2.0, stream: str = "outbound"
) -> PostmarkProvider:
    return PostmarkProvider(
        api_url=url, server_token=token, message_stream=stream, retention_days=45,
        search_lag_seconds=0.0, connect_timeout=1.0, read_timeout=read_timeout,
    )  # fmt: skip


def soon() -> float:
    return time.monotonic() + 5


def test_postmark_send_carries_the_key_as_metadata_and_is_found_by_it(
    fake: FakePostmarkClient,
) -> None:
    provider = postmark(fake.url)
    answer = provider.send(KEY, payload())
    [delivery] = fake.deliveries()
    assert answer.accepted and answer.provider_id == delivery["id"]
    sent = json.loads(delivery["body"])
    assert sent["Metadata"] == {"message_key": KEY}
    assert sent["To"] == "jenny.rosen@example.com" and sent["ReplyTo"] == "support@shop.example"
    assert sent["MessageStream"] == "outbound"
    assert {"Name": "Auto-Submitted", "Value": "auto-generated"} in sent["Headers"]
    found = provider.look_up(KEY, payload(), since=datetime.now(UTC), deadline=soon())
    assert found.provider_id == delivery["id"]
    other = provider.look_up(KEY + "-other", payload(), since=datetime.now(UTC), deadline=soon())
    assert other.found is False and other.error is None


def test_postmark_gets_the_pdf_as_name_content_and_content_type(fake: FakePostmarkClient) -> None:
    assert postmark(fake.url).send(KEY, payload(attachments=[ATTACHMENT])).accepted
    [delivery] = fake.deliveries()
    [attached] = json.loads(delivery["body"])["Attachments"]
    assert attached == {
        "Name": "receipt-ABC-0001.pdf",
        "Content": ATTACHMENT["content"],
        "ContentType": "application/pdf",
    }
    assert base64.b64decode(attached["Content"]) == PDF


def test_a_send_on_another_stream_is_searched_for_in_that_stream(
    fake: FakePostmarkClient,
) -> None:
    """Postmark's search looks in ``outbound`` unless told otherwise: a receipt sent on
    POSTMARK_MESSAGE_STREAM=receipts must be looked for there, or a retry sends it twice."""
    provider = postmark(fake.url, stream="receipts")
    answer = provider.send(KEY, payload())
    assert answer.accepted
    found = provider.look_up(KEY, payload(), since=datetime.now(UTC), deadline=soon())
    assert found.provider_id == answer.provider_id
    elsewhere = postmark(fake.url).look_up(KEY, payload(), since=datetime.now(UTC), deadline=soon())
    assert elsewhere.found is False


def test_the_same_payload_makes_the_same_postmark_request_bytes() -> None:
    assert postmark_body(KEY, payload(), "outbound") == postmark_body(KEY, payload(), "outbound")


def test_a_key_longer_than_postmarks_metadata_limit_goes_as_its_sha256(
    fake: FakePostmarkClient,
) -> None:
    long_key = "acct_1" + "x" * 30 + "/live/in_1" + "y" * 30 + "/refund-re_1" + "z" * 24
    assert len(long_key) > 80
    digest = hashlib.sha256(long_key.encode()).hexdigest()
    assert metadata_for(long_key) == {"message_key_sha256": digest}
    provider = postmark(fake.url)
    assert provider.send(long_key, payload()).accepted
    assert provider.look_up(long_key, payload(), since=datetime.now(UTC), deadline=soon()).found


def test_the_search_does_not_see_a_message_before_its_lag(fake: FakePostmarkClient) -> None:
    fake.configure(search_lag=30)
    provider = postmark(fake.url)
    assert provider.send(KEY, payload()).accepted
    assert not provider.look_up(KEY, payload(), since=datetime.now(UTC), deadline=soon()).found
    fake.advance_clock(31)
    assert provider.look_up(KEY, payload(), since=datetime.now(UTC), deadline=soon()).found


def test_postmark_errors_arrive_by_their_numbered_code(fake: FakePostmarkClient) -> None:
    fake.configure(inactive=["jenny.rosen@example.com"])
    inactive = postmark(fake.url).send(KEY, payload())
    assert (inactive.http_status, inactive.error) == (422, "inactive_recipient")
    refused = postmark(fake.url, token="wrong").send(KEY, payload())
    assert (refused.http_status, refused.error) == (401, "bad_or_missing_api_token")
    assert "POSTMARK_SERVER_TOKEN" in (reaction_to(refused).fix or "")
    search = postmark(fake.url, token="wrong").look_up(
        KEY, payload(), since=datetime.now(UTC), deadline=soon()
    )
    assert (search.error, search.permanent) == ("lookup_bad_or_missing_api_token", True)


def test_postmarks_rate_limit_is_a_429_with_its_error_code(fake: FakePostmarkClient) -> None:
    fake.configure(rate_limit=1, rate_window=60)
    provider = postmark(fake.url)
    assert provider.send(KEY, payload()).accepted
    limited = provider.send(KEY + "-2", payload())
    assert (limited.http_status, limited.error) == (429, "rate_limit_exceeded")
    assert fake.stats()["rate_limited"] == 1


def test_a_postmark_answer_later_than_the_timeout_is_a_timeout_after_acceptance(
    fake: FakePostmarkClient,
) -> None:
    fake.script({"hold": 1.0})
    answer = postmark(fake.url, read_timeout=0.3).send(KEY, payload())
    assert answer.error == "timeout" and fake.stats()["deliveries"] == 1


def test_a_failed_search_is_a_lookup_error(fake: FakePostmarkClient) -> None:
    fake.script(searches=[{"status": 503}])
    found = postmark(fake.url).look_up(KEY, payload(), since=datetime.now(UTC), deadline=soon())
    assert (found.error, found.http_status, found.permanent) == ("lookup_http_503", 503, False)


@pytest.mark.parametrize(
    ("script", "status"),
    [
        ({"status": 401, "error_code": 10}, 401),
        ({"status": 422, "error_code": 10}, 422),  # the ErrorCode alone says it
        ({"status": 401}, 401),  # the status alone says it
    ],
)
def test_a_search_refusing_the_token_names_postmark_server_token(
    fake: FakePostmarkClient, script: dict[str, int], status: int
) -> None:
    fake.script(searches=[script])
    found = postmark(fake.url).look_up(KEY, payload(), since=datetime.now(UTC), deadline=soon())
    assert (found.http_status, found.permanent) == (status, True)
    assert found.fix is not None and "POSTMARK_SERVER_TOKEN" in found.fix


def test_a_search_with_a_wrong_token_names_postmark_server_token(
    fake: FakePostmarkClient,
) -> None:
    found = postmark(fake.url, token="revoked").look_up(
        KEY, payload(), since=datetime.now(UTC), deadline=soon()
    )
    assert (found.error, found.http_status) == ("lookup_bad_or_missing_api_token", 401)
    assert found.fix is not None and "POSTMARK_SERVER_TOKEN" in found.fix


# --- SMTP ---------------------------------------------------------------------------------


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    with running_smtp_server(username="receipts", password="s3cret") as server:
        yield server


def smtp_provider(url: str) -> SmtpProvider:
    target = EnvironmentReader({"SMTP_URL": url}).smtp_target("SMTP_URL")
    assert target is not None
    return SmtpProvider(target, connect_timeout=1.0, read_timeout=2.0)


def test_smtp_logs_in_and_sends_with_the_message_id_from_the_key(smtp: SmtpServer) -> None:
    answer = smtp_provider(smtp.url("s3cret")).send(KEY, payload())
    [received] = smtp.messages
    assert answer.accepted and answer.provider_id == received.message_id
    assert received.message_id == message_id(KEY, "billing@shop.example")
    assert (received.sender, received.recipients) == (
        "billing@shop.example", ["jenny.rosen@example.com"]
    )  # fmt: skip
    assert smtp_reaction(answer).reaction == "sent"


def test_smtp_sends_the_pdf_as_an_attachment_around_text_and_html(smtp: SmtpServer) -> None:
    answer = smtp_provider(smtp.url("s3cret")).send(KEY, payload(attachments=[ATTACHMENT]))
    [received] = smtp.messages
    assert answer.accepted
    message = received.message
    assert message.get_content_type() == "multipart/mixed"
    [alternative, attached] = message.iter_parts()
    assert alternative.get_content_type() == "multipart/alternative"
    assert attached.get_content_type() == "application/pdf"
    assert attached.get_filename() == "receipt-ABC-0001.pdf"
    assert attached.get_content() == PDF
    body = message.get_body(("plain",))
    assert body is not None and body.get_content().strip() == "Thanks for your payment."


@pytest.mark.parametrize(
    "attachments",
    [
        [ATTACHMENT, ATTACHMENT],
        [{**ATTACHMENT, "filename": "invoice.exe"}],
        [{**ATTACHMENT, "content_type": "text/html"}],
        [{**ATTACHMENT, "content": "not base64!"}],
    ],
)
def test_a_message_with_another_attachment_is_not_built(attachments: object) -> None:
    with pytest.raises(ValueError, match="attachment"):
        build_email(KEY, payload(attachments=attachments))


def test_smtp_wrong_password_is_a_configuration_error_naming_smtp_url(smtp: SmtpServer) -> None:
    answer = smtp_provider(smtp.url("wrong")).send(KEY, payload())
    assert (answer.error, answer.reply_code) == ("smtp_auth_failed", 535)
    assert "SMTP_URL" in (smtp_reaction(answer).fix or "")
    assert smtp.messages == []


def test_starttls_that_the_server_does_not_offer_is_a_configuration_error(
    smtp: SmtpServer,
) -> None:
    answer = smtp_provider(smtp.url("s3cret") + "?starttls=true").send(KEY, payload())
    assert answer.error == "smtp_starttls_not_offered"


def test_a_connection_lost_after_the_message_is_ambiguous_and_one_message_arrived(
    smtp: SmtpServer,
) -> None:
    smtp.drop_after_data()
    answer = smtp_provider(smtp.url("s3cret")).send(KEY, payload())
    assert answer.error == "ambiguous_smtp_send" and len(smtp.messages) == 1


@pytest.fixture(scope="module")
def test_certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed_certificate(tmp_path_factory.mktemp("smtp-tls"))


@pytest.mark.parametrize("tls", ["starttls", "implicit"])
def test_a_tls_session_is_trusted_through_ssl_cert_file_and_sends(
    tls: Literal["starttls", "implicit"],
    test_certificate: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """STARTTLS (smtp://…?starttls=true) and TLS from the first byte (smtps://): the
    relay's certificate is checked against the CAs OpenSSL is told about, which
    SSL_CERT_FILE names; no setting of ours is needed for a private CA."""
    monkeypatch.setenv("SSL_CERT_FILE", str(test_certificate[0]))
    with running_smtp_server(
        username="receipts", password="s3cret", tls=tls, certificate=test_certificate
    ) as server:
        url = server.url("s3cret") + ("?starttls=true" if tls == "starttls" else "")
        assert url.startswith("smtps://" if tls == "implicit" else "smtp://")
        answer = smtp_provider(url).send(KEY, payload())
        [received] = server.messages
    assert answer.accepted and answer.provider_id == received.message_id
    assert smtp_reaction(answer).reaction == "sent"


@pytest.mark.parametrize("tls", ["starttls", "implicit"])
def test_a_certificate_nobody_vouches_for_is_a_configuration_error(
    tls: Literal["starttls", "implicit"], test_certificate: tuple[Path, Path]
) -> None:
    with running_smtp_server(tls=tls, certificate=test_certificate) as server:
        url = server.url() + ("?starttls=true" if tls == "starttls" else "")
        answer = smtp_provider(url).send(KEY, payload())
        assert server.messages == []
    assert answer.error == "smtp_tls_failed" and "CERTIFICATE_VERIFY_FAILED" in (
        answer.message or ""
    )
    assert "SMTP_URL" in (smtp_reaction(answer).fix or "")


def test_a_reply_to_the_message_later_than_the_timeout_is_ambiguous(smtp: SmtpServer) -> None:
    """The server took the message and answers its final ``.`` only after the read
    timeout: nobody can say it was not delivered, so it is never a retry."""
    release = smtp.hold_reply_after_data()
    target = EnvironmentReader({"SMTP_URL": smtp.url("s3cret")}).smtp_target("SMTP_URL")
    assert target is not None
    answer = SmtpProvider(target, connect_timeout=1.0, read_timeout=0.3).send(KEY, payload())
    release.set()
    assert answer.error == "ambiguous_smtp_send" and "timed out" in (answer.message or "")
    assert smtp_reaction(answer).reaction == "review"
    assert len(smtp.messages) == 1


def test_a_5xx_to_the_final_dot_is_a_refusal_with_the_servers_reply(smtp: SmtpServer) -> None:
    smtp.reply_to_data("554 5.7.1 Message rejected as spam")
    answer = smtp_provider(smtp.url("s3cret")).send(KEY, payload())
    assert (answer.error, answer.reply_code) == ("smtp_554", 554)
    assert answer.message == "554 5.7.1 Message rejected as spam"
    assert smtp_reaction(answer).reaction == "review" and smtp.messages == []


def test_no_server_is_a_retry_nothing_sent() -> None:
    answer = smtp_provider("smtp://127.0.0.1:9").send(KEY, payload())
    assert answer.error == "connection_error" and smtp_reaction(answer).reaction == "retry"


# --- the message itself ---------------------------------------------------------------------


def test_the_message_has_a_utc_date_a_stable_message_id_and_auto_submitted() -> None:
    when = datetime(2026, 11, 30, 21, 30, 5, tzinfo=UTC)
    raw = build_email(KEY, payload(), date=when).as_bytes(policy=email.policy.SMTP)
    parsed = email.message_from_bytes(raw, policy=email.policy.default)
    assert parsed["Date"] == "Mon, 30 Nov 2026 21:30:05 +0000"
    digest = hashlib.sha256(KEY.encode()).hexdigest()[:32]
    assert parsed["Message-ID"] == f"<{digest}@shop.example>"
    assert build_email(KEY, payload())["Message-ID"] == parsed["Message-ID"]
    assert parsed["Auto-Submitted"] == "auto-generated"
    assert parsed["Reply-To"] == "support@shop.example"
    assert "Content-Language" not in parsed  # this HTML part declares no language


@pytest.mark.parametrize(
    ("root", "language"), [('<html lang="de">', "de"), ('<html lang="pt_BR">', "pt-BR")]
)
def test_the_message_says_the_language_its_html_part_declares(root: str, language: str) -> None:
    """Content-Language (RFC 3282) survives the body being set, which clears Content-* headers."""
    message = build_email(KEY, payload(html=f"<!doctype html>\n{root}<body>Danke</body></html>"))
    parsed = email.message_from_bytes(message.as_bytes(), policy=email.policy.default)
    assert parsed["Content-Language"] == language
