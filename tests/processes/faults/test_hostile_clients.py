"""Hostile clients against a real gunicorn with the shipped settings.

No secret is needed for any of these: they only hold sockets, send bodies in
odd ways, or scrape. The webhook must keep answering signed deliveries, and
answer each of these with a status that says what happened.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg
import requests

from tests import stripe_events
from tests.helpers import wait_for
from tests.real_processes import Gunicorn, web_environ
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


SLOW_CLIENTS = 40


def open_slow_body(port: int) -> socket.socket:
    """A client that announces 1,000 bytes of body, sends one, then nothing."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        b"POST /webhooks/stripe HTTP/1.1\r\nHost: localhost\r\n"
        b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    )
    return sock


def accepted_connections(server: Gunicorn) -> int:
    """Connections on the server's port that a gunicorn worker has accepted."""
    count = 0
    for pid in server.worker_pids():
        with contextlib.suppress(psutil.Error):
            count += sum(
                1
                for c in psutil.Process(pid).net_connections(kind="tcp")
                if c.laddr.port == server.port and c.status == psutil.CONN_ESTABLISHED
            )
    return count


def unanswered(sock: socket.socket) -> bool:
    """Nothing has come back on ``sock`` yet, and it is still open."""
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return True
    return False


def test_slow_bodies_do_not_stall_signed_deliveries(
    database_url: str, db: Db, start_gunicorn: type[Gunicorn]
) -> None:
    """Forty sockets that send webhook headers announcing 1,000 bytes, one byte of
    body, and then nothing, used to hold every gunicorn thread (one was held
    310 s) while every signed delivery timed out; no secret is needed for this.
    With the shipped settings, once every slow socket has been accepted, signed
    deliveries are each answered 200 while every slow body is still being
    waited for (a 30 s body timeout here, so none of them has been let go)."""
    environ = web_environ(database_url, RECEIPTS_BODY_TIMEOUT="30")
    server = start_gunicorn(environ, threads=None).start()
    slow = [open_slow_body(server.port) for _ in range(SLOW_CLIENTS)]
    try:
        wait_for(lambda: accepted_connections(server) >= SLOW_CLIENTS, what="every slow client")
        for n in range(8):
            event = stripe_events.event(stripe_events.invoice(id=f"in_1WhileSlow{n}"))
            answer = deliver(server, event, timeout=15)
            assert answer.status_code == 200, answer.text
        assert all(unanswered(sock) for sock in slow)
    finally:
        for sock in slow:
            sock.close()
    assert db.execute("SELECT count(*) AS n FROM email_outbox").fetchone() == {"n": 8}


def test_bodies_trickled_a_byte_at_a_time_are_cut_at_the_body_timeout(
    database_url: str, start_gunicorn: type[Gunicorn]
) -> None:
    """The body timeout bounds the whole body, not each read: forty clients each
    sending one byte every 0.3 s (they would need five minutes for their 1,000
    bytes) are each answered 408 (or closed) once RECEIPTS_BODY_TIMEOUT (here
    2 s) has passed, and none before."""
    server = start_gunicorn(
        web_environ(database_url, RECEIPTS_BODY_TIMEOUT="2"), threads=None
    ).start()
    started = time.monotonic()
    slow = [open_slow_body(server.port) for _ in range(SLOW_CLIENTS)]
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(0.3):
            for sock in slow:
                with contextlib.suppress(OSError):
                    sock.sendall(b" ")

    trickler = threading.Thread(target=trickle, daemon=True)
    trickler.start()
    try:
        answers = [status_line(sock, timeout=30) for sock in slow]
        waited = time.monotonic() - started
    finally:
        stop.set()
        trickler.join(5)
        for sock in slow:
            sock.close()
    assert all(line in (b"", b"HTTP/1.1 408 REQUEST TIMEOUT") for line in answers), set(answers)
    assert answers.count(b"HTTP/1.1 408 REQUEST TIMEOUT") >= SLOW_CLIENTS // 2
    assert waited > 1.5  # not cut before the body timeout


def test_the_web_process_opens_no_control_socket_and_does_not_name_its_server(
    database_url: str, start_gunicorn: type[Gunicorn]
) -> None:
    """Recent gunicorn listens on a control socket (gunicorn.ctl) that
    can reload, reconfigure or stop the server; the web process needs none, so a
    process of the same user cannot steer it through one."""
    server = start_gunicorn(web_environ(database_url)).start()
    assert server.process is not None
    master = psutil.Process(server.process.pid)
    unix = [c for c in master.net_connections(kind="unix") if c.laddr]
    assert unix == [], unix
    assert not (Path.home() / ".gunicorn").exists()
    # nor does it tell who serves it, and in which version
    assert requests.get(server.url + "/healthz", timeout=10).headers["Server"] == "receipts"
