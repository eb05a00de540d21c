"""A real SMTP server for tests (aiosmtpd), which can lose the connection after DATA.

``with running_smtp_server() as smtp:`` serves on a free port from a thread of
this process; ``smtp.url`` is an ``SMTP_URL`` for it. What it received is in
``smtp.messages`` (the parsed message and its envelope), one entry per
message it took responsibility for. Faults, each for the next messages:

* ``smtp.drop_after_data(n)``: take the message (it counts as delivered), then
  close the connection without replying to the final ``.``: the classic
  ambiguous send of RFC 5321 §4.1.5;
* ``smtp.reply_to_data("451 4.3.0 try again later", n)``: refuse the message;
* ``smtp.refuse_recipient(address, "550 5.1.1 no such user")``;
* ``release = smtp.hold_reply_after_data()``: take the next message (it counts
  as delivered) and answer its final ``.`` only once the test calls
  ``release.set()`` (every hold is released when the server stops).

With ``username``/``password`` it offers AUTH (PLAIN, LOGIN) on the plain
connection and refuses other credentials with 535. With ``tls="starttls"``
it offers STARTTLS, with ``tls="implicit"`` it speaks TLS from the first
byte (``smtps``), both with the certificate ``self_signed_certificate`` makes (a
throwaway self-signed one for 127.0.0.1, made with the ``openssl`` command;
a client trusts it through ``SSL_CERT_FILE``).
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any, Literal

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from tests.helpers import free_port


@dataclass
class Received:
    sender: str
    recipients: list[str]
    message: EmailMessage

    @property
    def message_id(self) -> str:
        return str(self.message["Message-ID"])


@dataclass
class _Handler:
    messages: list[Received] = field(default_factory=list)
    drops: int = 0
    data_replies: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    holds: list[threading.Event] = field(default_factory=list)
    held: list[threading.Event] = field(default_factory=list)  # every hold, to release at stop
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: list[str]
    ) -> str:
        refusal = self.refused.get(address.lower())
        if refusal is not None:
            return refusal
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self.lock:
            if self.data_replies:
                return self.data_replies.pop(0)
            received = Received(
                sender=envelope.mail_from,
                recipients=list(envelope.rcpt_tos),
                message=message_from_bytes(envelope.original_content, policy=policy.default),
            )
            self.messages.append(received)
            drop = self.drops > 0
            self.drops -= 1 if drop else 0
            hold = self.holds.pop(0) if self.holds else None
        if drop:
            server.transport.abort()  # the message is taken; the reply never leaves
        if hold is not None:  # the message is taken; the reply waits for the test
            await asyncio.get_running_loop().run_in_executor(None, hold.wait)
        return "250 2.0.0 OK: queued"


class SmtpServer:
    def __init__(
        self, handler: _Handler, port: int, username: str | None, scheme: str = "smtp"
    ) -> None:
        self.handler = handler
        self.port = port
        self.username = username
        self.scheme = scheme

    @property
    def messages(self) -> list[Received]:
        with self.handler.lock:
            return list(self.handler.messages)

    def url(self, password: str | None = None) -> str:
        login = f"{self.username}:{password}@" if self.username and password else ""
        return f"{self.scheme}://{login}127.0.0.1:{self.port}"

    def drop_after_data(self, messages: int = 1) -> None:
        with self.handler.lock:
            self.handler.drops += messages

    def reply_to_data(self, reply: str, messages: int = 1) -> None:
        with self.handler.lock:
            self.handler.data_replies.extend([reply] * messages)

    def refuse_recipient(self, address: str, reply: str) -> None:
        with self.handler.lock:
            self.handler.refused[address.lower()] = reply

    def hold_reply_after_data(self) -> threading.Event:
        """The next message is taken; its reply leaves when the returned event is set."""
        release = threading.Event()
        with self.handler.lock:
            self.handler.holds.append(release)
            self.handler.held.append(release)
        return release

    def release_all(self) -> None:
        with self.handler.lock:
            held = list(self.handler.held)
        for release in held:
            release.set()


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A throwaway self-signed certificate and key for 127.0.0.1, made by ``openssl``."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    cert, key = directory / "smtp-cert.pem", directory / "smtp-key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


@contextmanager
def running_smtp_server(
    *,
    username: str | None = None,
    password: str | None = None,
    tls: Literal["starttls", "implicit"] | None = None,
    certificate: tuple[Path, Path] | None = None,
) -> Iterator[SmtpServer]:
    handler = _Handler()
    port = free_port()
    options: dict[str, Any] = {}
    server_tls: ssl.SSLContext | None = None
    if tls is not None:
        assert certificate is not None, "TLS needs a certificate (see self_signed_certificate())"
        server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_tls.load_cert_chain(*certificate)
    if username is not None:

        def authenticate(
            server: Any, session: Any, envelope: Any, mechanism: str, data: Any
        ) -> AuthResult:
            ok = isinstance(data, LoginPassword) and (data.login, data.password) == (
                username.encode(),
                (password or "").encode(),
            )
            return AuthResult(success=ok, handled=False)

        options = {"authenticator": authenticate, "auth_require_tls": False}
    if tls == "starttls":
        options["tls_context"] = server_tls
    controller = Controller(
        handler,
        hostname="127.0.0.1",
        port=port,
        server_hostname="smtp.test",
        ssl_context=server_tls if tls == "implicit" else None,
        **options,
    )
    controller.start()
    server = SmtpServer(handler, port, username, "smtps" if tls == "implicit" else "smtp")
    try:
        yield server
    finally:
        server.release_all()
        controller.stop()
