"""The providers against real servers: Resend's answers read and decided, the file sink.

The fake provider answers every error Resend documents with Resend's body and
headers; each is sent for real and decided by the table of
``receipts.delivery.decisions`` (the table itself: tests/unit/test_decisions.py).
"""

from __future__ import annotations

import base64
import contextlib
import email
import email.policy
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from receipts.delivery.answers import ProviderAnswer, classify_response
from receipts.delivery.providers.file_sink import FileSinkProvider
from receipts.delivery.providers.resend import ResendProvider
from receipts.delivery.rules import Reaction
from receipts.delivery.rules.resend import RESEND_ERRORS, reaction_to
from tests.fake_provider import MESSAGES, FakeProviderClient, running_fake_provider
from tests.helpers import wait_for

API_KEY = "re_test_key"
KEY = "platform/test/in_1Provider/invoice-paid"


def payload(**overrides: object) -> bytes:
    document: dict[str, object] = {
        "from": "Billing <billing@example.com>",
        "to": ["jenny.rosen@example.com"],
        "subject": "Receipt for invoice ABC-0001",
        "text": "Thanks for your payment.",
        "html": "<p>Thanks for your payment.</p>",
        "tags": [{"name": "message_key", "value": "platform_test_in_1Provider_invoice-paid"}],
    }
    document.update(overrides)
    return json.dumps(document).encode()


@pytest.fixture
def fake() -> Iterator[FakeProviderClient]:
    with running_fake_provider(api_key=API_KEY) as client:
        yield client


def resend(url: str, *, api_key: str = API_KEY, read_timeout: float = 2.0) -> ResendProvider:
    return ResendProvider(
        api_url=url, api_key=api_key, connect_timeout=1.0, read_timeout=read_timeout
    )


def test_accepted_send_returns_the_provider_id_and_delivers_the_exact_bytes(
    fake: FakeProviderClient,
) -> None:
    body = payload()
    answer = resend(fake.url).send(KEY, body)
    [delivery] = fake.deliveries()
    assert answer.accepted and answer.http_status == 200
    assert answer.provider_id == delivery["id"]
    assert delivery["key"] == KEY and delivery["body"].encode() == body


def test_resend_gets_the_pdf_attachment_as_stored(fake: FakeProviderClient) -> None:
    """Resend's own shape (filename, base64 content, content_type): the bytes as frozen."""
    pdf = b"%PDF-1.3\n" + bytes(range(256))
    attached = {
        "filename": "receipt-ABC-0001.pdf",
        "content": base64.b64encode(pdf).decode(),
        "content_type": "application/pdf",
    }
    body = payload(attachments=[attached])
    assert resend(fake.url).send(KEY, body).accepted
    [delivery] = fake.deliveries()
    assert delivery["body"].encode() == body
    [arrived] = json.loads(delivery["body"])["attachments"]
    assert base64.b64decode(arrived["content"], validate=True) == pdf
    missing = payload(attachments=[{"filename": "receipt-x.pdf"}])
    refused = resend(fake.url).send(KEY + "-2", missing)
    assert refused.http_status == 422 and refused.error == "invalid_attachment"


def test_same_key_and_body_replays_the_first_answer_without_a_new_delivery(
    fake: FakeProviderClient,
) -> None:
    provider = resend(fake.url)
    first, second = provider.send(KEY, payload()), provider.send(KEY, payload())
    assert first.provider_id == second.provider_id
    stats = fake.stats()
    assert stats["requests"] == 2 and stats["deliveries"] == 1 and stats["replays"] == 1


def test_same_key_with_another_body_is_rejected_for_review(fake: FakeProviderClient) -> None:
    provider = resend(fake.url)
    provider.send(KEY, payload())
    answer = provider.send(KEY, payload(subject="Another subject"))
    assert (answer.http_status, answer.error) == (409, "invalid_idempotent_request")
    assert reaction_to(answer).reaction == Reaction.REVIEW
    assert fake.stats()["deliveries"] == 1


def test_a_key_still_in_flight_is_retried_later(fake: FakeProviderClient) -> None:
    """409 concurrent_idempotent_requests: the first request has not answered yet."""
    fake.script({"hold_answer": "first"})
    provider = resend(fake.url, read_timeout=30)
    first = threading.Thread(target=provider.send, args=(KEY, payload()))
    first.start()
    wait_for(lambda: fake.held("first") == 1, what="the first request accepted and held")
    answer = provider.send(KEY, payload())
    fake.release("first")
    first.join(timeout=10)
    assert (answer.http_status, answer.error) == (409, "concurrent_idempotent_requests")
    assert reaction_to(answer).reaction == Reaction.RETRY


@pytest.mark.parametrize(("status", "name"), sorted(RESEND_ERRORS))
def test_every_documented_error_comes_back_with_its_name_and_reaction(
    fake: FakeProviderClient, status: int, name: str
) -> None:
    """Scripted by name, the fake answers with Resend's body; the provider reads
    the status and name, and the table's reaction for it follows. Nothing is delivered."""
    fake.script({"status": status, "name": name})
    answer = resend(fake.url).send(KEY, payload())
    assert (answer.http_status, answer.error) == (status, name)
    assert reaction_to(answer) == RESEND_ERRORS[(status, name)]
    assert fake.stats()["deliveries"] == 0


def test_the_400_that_says_the_api_key_is_invalid_is_a_configuration_error(
    fake: FakeProviderClient,
) -> None:
    """400 validation_error "API key is invalid" (a malformed key) names RESEND_API_KEY,
    while a 400 validation_error about a field is the message's problem."""
    fake.script({"status": 400, "name": "validation_error", "message": "API key is invalid"})
    refused = resend(fake.url).send(KEY, payload())
    assert refused.api_key_refused and reaction_to(refused).reaction == Reaction.CONFIGURATION
    assert "RESEND_API_KEY" in (reaction_to(refused).fix or "")
    fake.script({"status": 400, "name": "validation_error"})
    about_a_field = resend(fake.url).send(KEY, payload())
    assert not about_a_field.api_key_refused
    assert reaction_to(about_a_field).reaction == Reaction.REVIEW


@pytest.mark.parametrize(
    ("script", "reaction", "error"),
    [
        ({"status": 500}, Reaction.RETRY, "http_500"),
        ({"status": 503, "name": "service_unavailable"}, Reaction.RETRY, "service_unavailable"),
        ({"status": 418}, Reaction.REVIEW, "http_418"),
        ({"no_id": True}, Reaction.RETRY, "no_provider_id"),
    ],
)
def test_answers_resend_does_not_document_are_decided_by_their_status(
    fake: FakeProviderClient, script: dict[str, object], reaction: Reaction, error: str
) -> None:
    """An unknown 5xx is a retry, an unknown 4xx the message's problem, a 2xx without id a retry."""
    fake.script(script)
    answer = resend(fake.url).send(KEY, payload())
    assert (reaction_to(answer).reaction, answer.error) == (reaction, error)
    assert fake.stats()["deliveries"] == 0


def test_a_wrong_path_names_resend_api_url(fake: FakeProviderClient) -> None:
    """RESEND_API_URL with a wrong path: the fake answers 404 not_found as Resend does."""
    answer = resend(fake.url + "/v1").send(KEY, payload())
    assert (answer.http_status, answer.error) == (404, "not_found")
    assert "RESEND_API_URL" in (reaction_to(answer).fix or "")
    assert requests.get(f"{fake.url}/nowhere", timeout=5).json() == {
        "statusCode": 404,
        "name": "not_found",
        "message": MESSAGES["not_found"],
    }


def test_a_redirect_is_not_followed_and_names_resend_api_url(fake: FakeProviderClient) -> None:
    """A 3xx (an http:// URL sent to https://, a web page) is answered, never followed:
    the API key does not travel on, and the run stops naming RESEND_API_URL."""
    fake.script({"status": 301, "headers": {"Location": "https://elsewhere.example/emails"}})
    answer = resend(fake.url).send(KEY, payload())
    assert answer.http_status == 301 and reaction_to(answer).reaction == Reaction.CONFIGURATION
    assert fake.stats()["requests"] == 1


def test_retry_after_and_rate_limit_headers_are_read(fake: FakeProviderClient) -> None:
    fake.script({"status": 429, "headers": {"Retry-After": "7", "ratelimit-reset": "3"}})
    answer = resend(fake.url).send(KEY, payload())
    assert answer.retry_after == 7.0 and answer.rate_limit_reset == 3.0


def test_the_fake_enforces_a_rate_with_resends_headers(fake: FakeProviderClient) -> None:
    """At 3 requests per second the fourth request within a second is refused with 429
    rate_limit_exceeded and Retry-After; every answer says the limit and what remains."""
    fake.configure(rate_limit=3)
    provider = resend(fake.url)
    answers = [provider.send(f"{KEY}-{n}", payload()) for n in range(4)]
    assert [a.http_status for a in answers] == [200, 200, 200, 429]
    assert [a.rate_limit_remaining for a in answers] == [2, 1, 0, 0]
    assert {a.rate_limit_limit for a in answers} == {3}
    assert answers[3].error == "rate_limit_exceeded" and answers[3].retry_after == 1.0
    assert reaction_to(answers[3]).reaction == Reaction.RATE_LIMITED
    assert fake.stats()["rate_limited"] == 1 and fake.stats()["deliveries"] == 3


def test_the_fake_enforces_a_daily_quota(fake: FakeProviderClient) -> None:
    """Past the daily quota a new email is refused (429 daily_quota_exceeded, the usage
    header), a replay of an accepted key is not, and the refused key stays free."""
    fake.configure(daily_quota=1)
    provider = resend(fake.url)
    assert provider.send(KEY, payload()).accepted
    assert provider.send(KEY, payload()).accepted  # a replay sends no new email
    refused = provider.send(KEY + "-2", payload())
    assert (refused.http_status, refused.error) == (429, "daily_quota_exceeded")
    assert refused.retry_after is None
    assert reaction_to(refused).reaction == Reaction.QUOTA
    fake.advance_clock(24 * 3600)
    assert provider.send(KEY + "-2", payload()).accepted
    assert fake.stats()["quota_refused"] == 1


def test_the_providers_error_message_is_kept_on_one_bounded_line() -> None:
    """Resend's ``message`` travels with the answer for operators: control characters
    become spaces, it is cut at 300 characters, and a 2xx or a body without one has none."""
    body = json.dumps(
        {"statusCode": 422, "name": "validation_error",
         "message": "Invalid `to` field.\nThe email address needs to follow the "
                    "`email@example.com` format." + "x" * 400}
    ).encode()  # fmt: skip
    answer = classify_response(422, {}, body)
    assert answer.error == "validation_error"
    assert answer.message is not None and len(answer.message) == 300
    assert answer.message.startswith("Invalid `to` field. The email address needs")
    assert classify_response(500, {}, b"not json").message is None
    assert classify_response(200, {}, b'{"id": "re_1", "message": "ok"}').message is None


def test_a_read_timeout_is_a_retry(fake: FakeProviderClient) -> None:
    fake.script({"hold": "until-the-test-ends"})  # no answer before the read timeout
    answer = resend(fake.url, read_timeout=0.2).send(KEY, payload())
    assert answer == ProviderAnswer(error="timeout")


def test_a_refused_connection_is_a_retry() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    answer = resend(f"http://127.0.0.1:{port}").send(KEY, payload())
    assert answer == ProviderAnswer(error="connection_error")


def test_a_proxy_from_the_environment_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP_PROXY and friends are read once, when the provider is made, and honoured."""
    with _recording_server() as (proxy_url, requests_seen):
        monkeypatch.setenv("HTTP_PROXY", proxy_url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        provider = resend("http://resend.invalid")
        monkeypatch.delenv("HTTP_PROXY")
        answer = provider.send(KEY, payload())
        provider.close()
    assert answer.accepted and answer.provider_id == "re_recorded"
    [(request_line, _, _)] = requests_seen
    assert request_line == "POST http://resend.invalid/emails HTTP/1.1"


def test_each_send_carries_its_key_the_api_key_and_the_stored_bytes() -> None:
    body = payload()
    with _recording_server() as (url, requests_seen):
        provider = resend(url)
        provider.send(KEY, body)
        provider.send(KEY + "-2", body)
        provider.close()
    assert [line for line, _, _ in requests_seen] == ["POST /emails HTTP/1.1"] * 2
    for (_, headers, sent), key in zip(requests_seen, (KEY, KEY + "-2"), strict=True):
        assert headers["Idempotency-Key"] == key
        assert headers["Authorization"] == f"Bearer {API_KEY}"
        assert headers["Content-Type"] == "application/json"
        assert headers["User-Agent"] == "receipts-worker"
        assert headers["Content-Length"] == str(len(body)) and sent == body


Seen = tuple[str, email.message.Message, bytes]  # request line, headers, body


@contextlib.contextmanager
def _recording_server() -> Iterator[tuple[str, list[Seen]]]:
    """One keep-alive connection answered 200 with an id; every request on it, in order."""
    seen: list[Seen] = []
    listener = socket.create_server(("127.0.0.1", 0))
    answer = b'{"id": "re_recorded"}'
    reply = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(answer)}\r\n\r\n".encode()
        + answer
    )

    def serve() -> None:
        with contextlib.suppress(OSError), listener.accept()[0] as connection:
            buffered = b""
            while chunk := connection.recv(65536):
                buffered += chunk
                head, separator, rest = buffered.partition(b"\r\n\r\n")
                if not separator:
                    continue
                request_line, _, header_lines = head.partition(b"\r\n")
                headers = email.message_from_bytes(header_lines)
                length = int(headers["Content-Length"])
                if len(rest) < length:
                    continue
                seen.append((request_line.decode(), headers, rest[:length]))
                buffered = rest[length:]
                connection.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", seen
    finally:
        thread.join(timeout=5)
        listener.close()


def test_the_fake_forgets_a_key_after_24_hours(fake: FakeProviderClient) -> None:
    """The one duplicate the product cannot rule out, reproducible in tests."""
    provider = resend(fake.url)
    provider.send(KEY, payload())
    fake.advance_clock(24 * 3600)
    provider.send(KEY, payload())
    assert fake.stats()["deliveries_by_key"] == {KEY: 2}


def test_the_fake_can_ignore_idempotency_keys(fake: FakeProviderClient) -> None:
    fake.configure(idempotency=False)
    provider = resend(fake.url)
    provider.send(KEY, payload())
    provider.send(KEY, payload())
    assert fake.stats()["deliveries"] == 2


def test_the_fake_rejects_an_unusable_email(fake: FakeProviderClient) -> None:
    response = requests.post(
        f"{fake.url}/emails",
        data=b'{"to": []}',
        headers={"Authorization": f"Bearer {API_KEY}", "Idempotency-Key": KEY},
        timeout=5,
    )
    assert response.status_code == 422 and response.json()["name"] == "validation_error"


# --- the local file sink ---------------------------------------------------------------


def test_file_sink_writes_one_rfc5322_message_per_key(tmp_path: Path) -> None:
    sink = FileSinkProvider(tmp_path / "mail")
    answer = sink.send(KEY, payload())
    [written] = (tmp_path / "mail").glob("*.eml")
    message = email.message_from_bytes(written.read_bytes(), policy=email.policy.default)
    assert answer.accepted and answer.provider_id
    assert message["To"] == "jenny.rosen@example.com"
    assert message["Subject"] == "Receipt for invoice ABC-0001"
    assert message["X-Receipts-Message-Key"] == KEY
    assert message.get_body(("plain",)).get_content().strip() == "Thanks for your payment."  # type: ignore[union-attr]
    assert "<p>Thanks" in message.get_body(("html",)).get_content()  # type: ignore[union-attr]


def test_file_sink_writes_the_pdf_attachment(tmp_path: Path) -> None:
    pdf = b"%PDF-1.3\n" + bytes(range(256))
    attached = {
        "filename": "receipt-ABC-0001.pdf",
        "content": base64.b64encode(pdf).decode(),
        "content_type": "application/pdf",
    }
    assert FileSinkProvider(tmp_path / "mail").send(KEY, payload(attachments=[attached])).accepted
    [written] = (tmp_path / "mail").glob("*.eml")
    message = email.message_from_bytes(written.read_bytes(), policy=email.policy.default)
    [part] = message.iter_attachments()
    assert part.get_filename() == "receipt-ABC-0001.pdf"
    assert part.get_content() == pdf


def test_file_sink_is_idempotent_per_key(tmp_path: Path) -> None:
    sink = FileSinkProvider(tmp_path)
    first = sink.send(KEY, payload())
    written = next(tmp_path.glob("*.eml"))
    before = written.read_bytes()
    second = sink.send(KEY, payload())
    assert first.provider_id == second.provider_id
    assert list(tmp_path.iterdir()) == [written] and written.read_bytes() == before


def test_file_sink_refuses_the_same_key_with_another_payload(tmp_path: Path) -> None:
    sink = FileSinkProvider(tmp_path)
    sink.send(KEY, payload())
    answer = sink.send(KEY, payload(subject="Changed"))
    assert (answer.http_status, answer.error) == (409, "invalid_idempotent_request")
    assert reaction_to(answer).reaction == Reaction.REVIEW


def test_file_sink_file_names_stay_inside_the_directory(tmp_path: Path) -> None:
    sink = FileSinkProvider(tmp_path / "mail")
    sink.send("../../etc/passwd/test/in_1/invoice-paid", payload())
    sink.send("acct_1/live/in_1/invoice-paid", payload())
    names = sorted(path.name for path in (tmp_path / "mail").iterdir())
    assert len(names) == 2 and all("/" not in name and name.endswith(".eml") for name in names)
    assert not (tmp_path / "etc").exists()


def test_file_sink_racing_threads_write_one_file(tmp_path: Path) -> None:
    sink = FileSinkProvider(tmp_path)
    answers: list[ProviderAnswer] = []
    threads = [
        threading.Thread(target=lambda: answers.append(sink.send(KEY, payload()))) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(list(tmp_path.glob("*.eml"))) == 1
    assert not list(tmp_path.glob(".tmp-*"))
    assert {answer.provider_id for answer in answers} == {answers[0].provider_id}


def test_file_sink_never_turns_one_encoded_recipient_into_two(tmp_path: Path) -> None:
    """An RFC 2047 encoded word in the local part is decoded by header parsers into
    'evil@evil.example,': the sink refuses the message instead of writing a To
    header that names another recipient."""
    sink = FileSinkProvider(tmp_path)
    answer = sink.send(KEY, payload(to=["=?utf-8?q?evil=40evil.example=2C?=@example.com"]))
    assert (reaction_to(answer).reaction, answer.error) == (Reaction.REVIEW, "validation_error")
    assert not any(b"evil.example" in path.read_bytes() for path in tmp_path.glob("*.eml"))


@pytest.mark.parametrize(
    "overrides",
    [
        {"to": ["a@[b.com"]},
        {"to": ["jenny.rosen@example.com", "a@[b.com"]},
        {"from": "Billing <a@[b.com>"},
        {"reply_to": "a@[b.com"},
        {"from": "Billing <billing@example.com>\r\nBcc: everyone@example.com"},
        {"to": "jenny.rosen@example.com"},
        {"to": []},
        {"subject": "Receipt\r\nBcc: everyone@example.com"},
    ],
)
def test_file_sink_rejects_a_message_it_cannot_write_instead_of_raising(
    tmp_path: Path, overrides: dict[str, object]
) -> None:
    """An address the sink cannot write is a problem of this message (review), never
    an exception that leaves the row in processing; nothing is written."""
    answer = FileSinkProvider(tmp_path).send(KEY, payload(**overrides))
    assert (reaction_to(answer).reaction, answer.error) == (Reaction.REVIEW, "validation_error")
    assert list(tmp_path.iterdir()) == []


def test_file_sink_writes_addresses_as_parsed(tmp_path: Path) -> None:
    """From, To and Reply-To are written from parsed addresses, display names quoted."""
    sink = FileSinkProvider(tmp_path)
    answer = sink.send(
        KEY,
        payload(
            **{
                "from": '"Acme, Inc" <billing@example.com>',
                "to": ["jenny.rosen@example.com", "sam@example.org"],
                "reply_to": "help@example.com",
            }
        ),
    )
    [written] = tmp_path.glob("*.eml")
    message = email.message_from_bytes(written.read_bytes(), policy=email.policy.default)
    assert answer.accepted
    assert [a.addr_spec for a in message["To"].addresses] == [
        "jenny.rosen@example.com",
        "sam@example.org",
    ]
    [sender] = message["From"].addresses
    assert (sender.display_name, sender.addr_spec) == ("Acme, Inc", "billing@example.com")
    assert [a.addr_spec for a in message["Reply-To"].addresses] == ["help@example.com"]


def test_the_sent_list_is_paged_back_to_the_first_attempt(fake: FakeProviderClient) -> None:
    """An accepted email 150 sends back is found on the second page of GET /emails;
    one with another subject, or sent before the first attempt, is not."""
    import time
    from datetime import UTC, datetime, timedelta

    provider = resend(fake.url)
    since = datetime.now(UTC) - timedelta(seconds=5)
    first = provider.send(KEY, payload())
    for n in range(150):
        provider.send(f"{KEY}/other-{n}", payload(subject=f"Another receipt {n}"))
    deadline = time.monotonic() + 10
    found = provider.look_up(KEY, payload(), since=since, deadline=deadline)
    assert (found.provider_id, found.error) == (first.provider_id, None)
    assert "Resend's sent list" in found.searched
    other = provider.look_up(KEY, payload(subject="Never sent"), since=since, deadline=deadline)
    assert (other.found, other.error) == (False, None)
    later = provider.look_up(KEY, payload(), since=datetime.now(UTC) + timedelta(minutes=1),
                             deadline=deadline)  # fmt: skip
    assert later.found is False


def test_a_key_that_may_only_send_cannot_read_the_sent_list(fake: FakeProviderClient) -> None:
    from datetime import UTC, datetime

    fake.set_domains([], restricted_keys=[API_KEY])
    found = resend(fake.url).look_up(KEY, payload(), since=datetime.now(UTC), deadline=float("inf"))
    assert (found.error, found.http_status, found.permanent) == (
        "lookup_restricted_api_key", 401, True,
    )  # fmt: skip
    assert found.fix is None  # the key sends: not a configuration error, a limit of the key


def test_a_wrong_key_at_the_sent_list_names_resend_api_key(fake: FakeProviderClient) -> None:
    from datetime import UTC, datetime

    found = resend(fake.url, api_key="re_revoked").look_up(
        KEY, payload(), since=datetime.now(UTC), deadline=float("inf")
    )
    assert (found.error, found.http_status, found.permanent) == (
        "lookup_invalid_api_key", 403, True,
    )  # fmt: skip
    assert found.fix is not None and "RESEND_API_KEY" in found.fix
