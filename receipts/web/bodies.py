"""A webhook's body, read whole before anything parses it, bounded in size and in time.

Size: a declared ``Content-Length`` over ``RECEIPTS_MAX_BODY_BYTES`` is
refused without reading a byte. A chunked body (no length declared) is read up
to one byte past the limit and refused if it goes on: werkzeug's own limit cut
such a body short silently, so a correctly signed delivery failed its
signature and was answered 400 instead of 413.

Time: reading a body blocks a worker thread, and gunicorn sets no deadline on
it, so forty clients that announce a body and never send it held every thread
(one for 310 s) while signed deliveries timed out. A client that has not sent
the whole body within ``RECEIPTS_BODY_TIMEOUT`` seconds is answered 408: this
process's deadline thread (:mod:`receipts.deadlines`) shuts the read side of
its socket, which wakes the blocked read at once, and the connection is closed
after the answer. The bound is on the whole body, not each read, so a client
trickling a byte at a time gains nothing. Refusals are :class:`BodyRefused`,
carrying the status the routes answer and count.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from receipts import deadlines
from receipts.deadlines import Deadline

_READ_SIZE = 64 * 1024
_TOO_SLOW = "the request body did not arrive within {:g} s"


class BodyRefused(Exception):
    """A body we will not read on: 413 too large, 408 too slow, 400 unreadable."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def read_body(environ: Mapping[str, Any], *, limit: int, timeout: float | None = None) -> bytes:
    """The whole request body; BodyRefused when it is too large, too slow or unreadable."""
    length = _declared_length(environ)
    if length is not None and length > limit:
        raise BodyRefused(413, "body too large")
    if length is None and not _is_chunked(environ):
        return b""  # neither a length nor chunks: HTTP says there is no body
    wanted = length if length is not None else limit + 1
    with _deadline(environ, timeout) as deadline:
        try:
            body = _read_up_to(environ["wsgi.input"], wanted)
        except Exception:  # a malformed chunk, a reset, a read cut by the deadline
            body = None
    if deadline is not None and deadline.expired:
        raise BodyRefused(408, _TOO_SLOW.format(timeout))
    if body is None:
        raise BodyRefused(400, "the request body could not be read")
    if len(body) > limit:
        raise BodyRefused(413, "body too large")
    if length is not None and len(body) < length:
        raise BodyRefused(400, "the request body ended before its Content-Length")
    return body


def _deadline(
    environ: Mapping[str, Any], timeout: float | None
) -> AbstractContextManager[Deadline | None]:
    """Cut the read side of the client's socket once ``timeout`` has passed.

    gunicorn and werkzeug's server give the application the socket; without
    one (a test client) there is nothing to cut and no deadline.
    """
    sock = environ.get("gunicorn.socket") or environ.get("werkzeug.socket")
    if not timeout or not isinstance(sock, socket.socket):
        return nullcontext()
    return deadlines.after(timeout, lambda: sock.shutdown(socket.SHUT_RD))


def _declared_length(environ: Mapping[str, Any]) -> int | None:
    raw = str(environ.get("CONTENT_LENGTH") or "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise BodyRefused(400, "malformed Content-Length")
    return int(raw)


def _is_chunked(environ: Mapping[str, Any]) -> bool:
    """A body whose end the server finds (chunked), rather than a declared length."""
    encoding = str(environ.get("HTTP_TRANSFER_ENCODING") or "").lower()
    return "chunked" in encoding or bool(environ.get("wsgi.input_terminated"))


def _read_up_to(stream: Any, wanted: int) -> bytes:
    parts: list[bytes] = []
    received = 0
    while received < wanted:
        part = stream.read(min(_READ_SIZE, wanted - received))
        if not part:
            break
        parts.append(part)
        received += len(part)
    return b"".join(parts)
