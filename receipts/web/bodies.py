"""A webhook's body, read whole before anything parses it, and bounded in size.

A declared ``Content-Length`` over ``RECEIPTS_MAX_BODY_BYTES`` is refused
without reading a byte. A chunked body (no length declared) is read up to one
byte past the limit and refused if it goes on: werkzeug's own limit cut such a
body short silently, so a correctly signed delivery failed its signature and
was answered 400 instead of 413. Refusals are :class:`RejectedDelivery`, which
the routes answer and count with the status they send.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from receipts.ingest.events import RejectedDelivery

_READ_SIZE = 64 * 1024


def read_body(environ: Mapping[str, Any], *, limit: int) -> bytes:
    """The whole request body; RejectedDelivery (413 too large, 400 unreadable)."""
    length = _declared_length(environ)
    if length is not None and length > limit:
        raise RejectedDelivery(413, "body too large")
    if length is None and not _is_chunked(environ):
        return b""  # neither a length nor chunks: HTTP says there is no body
    wanted = length if length is not None else limit + 1
    try:
        body = _read_up_to(environ["wsgi.input"], wanted)
    except Exception:  # a malformed chunk, a connection reset: the parser's own words
        raise RejectedDelivery(400, "the request body could not be read") from None
    if len(body) > limit:
        raise RejectedDelivery(413, "body too large")
    if length is not None and len(body) < length:
        raise RejectedDelivery(400, "the request body ended before its Content-Length")
    return body


def _declared_length(environ: Mapping[str, Any]) -> int | None:
    raw = str(environ.get("CONTENT_LENGTH") or "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise RejectedDelivery(400, "malformed Content-Length")
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
