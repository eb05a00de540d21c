"""Hostile clients against a real gunicorn with the shipped settings.

No secret is needed for any of these: they only hold sockets, send bodies in
odd ways, or scrape. The webhook must keep answering signed deliveries, and
answer each of these with a status that says what happened.
"""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

import psycopg
import requests

from tests import stripe_events
from tests.processes.faults.conftest import Gunicorn, web_environ
from tests.stripe_events import TEST_SECRET, sign

Db = psycopg.Connection[dict[str, Any]]


def deliver(server: Gunicorn, event: dict[str, Any], timeout: float = 10) -> requests.Response:
    body = json.dumps(event).encode()
    return requests.post(
        server.url + "/webhooks/stripe",
        data=body,
        headers={"Stripe-Signature": sign(body, TEST_SECRET), "Content-Type": "application/json"},
        timeout=timeout,
    )


def status_line(sock: socket.socket, timeout: float) -> bytes:
    """The first line the server sends back, or b"" if it closes without one."""
    sock.settimeout(timeout)
    received = b""
    try:
        while b"\r\n" not in received:
            chunk = sock.recv(4096)
            if not chunk:
                break
            received += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return received.split(b"\r\n", 1)[0]


def post_chunked(server: Gunicorn, body: bytes, signature: str) -> bytes:
    """POST ``body`` with Transfer-Encoding: chunked from a raw socket; the status line.

    The body is sent from a thread of its own: a server that refuses it early
    stops reading, and the answer must still be read.
    """
    sock = socket.create_connection(("127.0.0.1", server.port))
    head = (
        "POST /webhooks/stripe HTTP/1.1\r\nHost: localhost\r\n"
        f"Stripe-Signature: {signature}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()

    def send() -> None:
        try:
            sock.sendall(head)
            for start in range(0, len(body), 16384):
                piece = body[start : start + 16384]
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # refused early: the server stopped reading

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        return status_line(sock, timeout=20)
    finally:
        sock.close()
        sender.join(5)


def test_an_over_limit_chunked_body_is_413_and_an_under_limit_one_is_stored(
    database_url: str, db: Db, start_gunicorn: type[Gunicorn]
) -> None:
    """A correctly signed body sent in chunks (no Content-Length) and larger than
    RECEIPTS_MAX_BODY_BYTES used to be cut at the limit without a word, fail
    its signature and be answered 400. It is now answered 413 and nothing is
    stored; a chunked body under the limit is read whole and stored."""
    server = start_gunicorn(web_environ(database_url), threads=None).start()
    big = stripe_events.event(stripe_events.invoice(customer_name="x" * 1_100_000))
    big_body = json.dumps(big).encode()
    assert post_chunked(server, big_body, sign(big_body, TEST_SECRET)).startswith(b"HTTP/1.1 413")
    assert db.execute("SELECT count(*) AS n FROM stripe_events").fetchone() == {"n": 0}

    small = stripe_events.event(stripe_events.invoice(id="in_1Chunked"))
    small_body = json.dumps(small).encode()
    assert post_chunked(server, small_body, sign(small_body, TEST_SECRET)).startswith(
        b"HTTP/1.1 200"
    )
    stored = db.execute("SELECT invoice_id FROM email_outbox").fetchall()
    assert stored == [{"invoice_id": "in_1Chunked"}]
