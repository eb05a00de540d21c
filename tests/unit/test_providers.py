"""The providers against real servers: Resend's answers classified, the file sink."""

from __future__ import annotations

import email
import email.policy
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from receipts.delivery.providers import (
    FileSinkProvider,
    ProviderAnswer,
    ResendProvider,
    classify_response,
)
from tests.fake_provider import FakeProviderClient, running_fake_provider

API_KEY = "re_test_key"
KEY = "platform/test/in_1Provider/invoice-paid"


def payload(**overrides: object) -> bytes:
    document = {
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
    assert answer.kind == "accepted" and answer.http_status == 200
    assert answer.provider_id == delivery["id"]
    assert delivery["key"] == KEY and delivery["body"].encode() == body


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
    assert answer == ProviderAnswer(
        kind="rejected",
        http_status=409,
        error="invalid_idempotent_request",
        message="fake provider: invalid_idempotent_request",
    )
    assert fake.stats()["deliveries"] == 1


def test_a_key_still_in_flight_is_retried_later(fake: FakeProviderClient) -> None:
    """409 concurrent_idempotent_requests: the first request has not answered yet."""
    fake.script({"hold": 1.0})
    provider = resend(fake.url)
    first = threading.Thread(target=provider.send, args=(KEY, payload()))
    first.start()
    while fake.stats()["deliveries"] == 0:
        pass
    answer = provider.send(KEY, payload())
    first.join()
    assert answer.kind == "retry" and answer.http_status == 409
    assert answer.error == "concurrent_idempotent_requests"


@pytest.mark.parametrize(
    ("script", "kind", "error"),
    [
        ({"status": 500}, "retry", "http_500"),
        ({"status": 503, "name": "service_unavailable"}, "retry", "service_unavailable"),
        ({"status": 429, "name": "rate_limit_exceeded"}, "retry", "rate_limit_exceeded"),
        ({"status": 422, "name": "validation_error"}, "rejected", "validation_error"),
        ({"status": 400, "name": "invalid_parameter"}, "rejected", "invalid_parameter"),
        ({"status": 403, "name": "invalid_from_address"}, "unauthorized", "invalid_from_address"),
        ({"no_id": True}, "retry", "no_provider_id"),
    ],
)
def test_each_provider_answer_maps_to_its_outcome(
    fake: FakeProviderClient, script: dict[str, object], kind: str, error: str
) -> None:
    fake.script(script)
    answer = resend(fake.url).send(KEY, payload())
    assert (answer.kind, answer.error) == (kind, error)
    assert fake.stats()["deliveries"] == 0


def test_retry_after_and_rate_limit_headers_are_read(fake: FakeProviderClient) -> None:
    fake.script({"status": 429, "headers": {"Retry-After": "7", "ratelimit-reset": "3"}})
    answer = resend(fake.url).send(KEY, payload())
    assert answer.retry_after == 7.0 and answer.rate_limit_reset == 3.0


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


def test_a_wrong_api_key_is_unauthorized_not_a_message_problem(fake: FakeProviderClient) -> None:
    answer = resend(fake.url, api_key="re_wrong").send(KEY, payload())
    assert (answer.kind, answer.http_status, answer.error) == (
        "unauthorized",
        403,
        "invalid_api_key",
    )


def test_a_read_timeout_is_a_retry(fake: FakeProviderClient) -> None:
    fake.script({"delay": 1.0})
    answer = resend(fake.url, read_timeout=0.2).send(KEY, payload())
    assert answer == ProviderAnswer(kind="retry", error="timeout")


def test_a_refused_connection_is_a_retry() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    answer = resend(f"http://127.0.0.1:{port}").send(KEY, payload())
    assert answer == ProviderAnswer(kind="retry", error="connection_error")


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
    assert answer.kind == "accepted" and answer.provider_id
    assert message["To"] == "jenny.rosen@example.com"
    assert message["Subject"] == "Receipt for invoice ABC-0001"
    assert message["X-Receipts-Message-Key"] == KEY
    assert message.get_body(("plain",)).get_content().strip() == "Thanks for your payment."  # type: ignore[union-attr]
    assert "<p>Thanks" in message.get_body(("html",)).get_content()  # type: ignore[union-attr]


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
    assert (answer.kind, answer.error) == ("rejected", "invalid_idempotent_request")


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
    assert (answer.kind, answer.error) == ("rejected", "validation_error")
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
    assert (answer.kind, answer.error) == ("rejected", "validation_error")
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
    assert answer.kind == "accepted"
    assert [a.addr_spec for a in message["To"].addresses] == [
        "jenny.rosen@example.com",
        "sam@example.org",
    ]
    [sender] = message["From"].addresses
    assert (sender.display_name, sender.addr_spec) == ("Acme, Inc", "billing@example.com")
    assert [a.addr_spec for a in message["Reply-To"].addresses] == ["help@example.com"]
