"""Who may read ``GET /metrics``: a private port, or a bearer token, or nobody.

The figures are business counts (receipts sent, reviews, conflicts) and each
scrape reads the database, so the webhook port does not serve them to anyone
who asks:

* a request that came in on ``RECEIPTS_METRICS_PORT`` (a second port gunicorn
  listens on, 127.0.0.1 unless a host is given; keep it off the internet) is
  served without a token. The port is read from the request's own socket, not
  from its Host header, which the client chooses;
* anywhere else ``Authorization: Bearer <RECEIPTS_METRICS_TOKEN>`` is required
  (401 without it); with no token configured the answer is 403, naming the two
  settings that open the endpoint;
* ``RECEIPTS_METRICS_ENABLED=false`` turns it off everywhere (404).
"""

from __future__ import annotations

import hmac
import socket
from collections.abc import Mapping
from typing import Any

from flask import Response

from receipts.config import Settings

_CLOSED = (
    "/metrics needs RECEIPTS_METRICS_TOKEN (then send Authorization: Bearer <token>), "
    "or RECEIPTS_METRICS_PORT (a private port served without a token)\n"
)


def refusal(settings: Settings, environ: Mapping[str, Any]) -> Response | None:
    """The answer that refuses this scrape, or None if it may be served."""
    if not settings.metrics_enabled:
        return Response("metrics are disabled\n", status=404, mimetype="text/plain")
    if arrived_on_port(environ, settings.metrics_port):
        return None
    if not settings.metrics_token:
        return Response(_CLOSED, status=403, mimetype="text/plain")
    if not _authorized(str(environ.get("HTTP_AUTHORIZATION", "")), settings.metrics_token):
        return Response(
            "a valid bearer token is required\n",
            status=401,
            mimetype="text/plain",
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    return None


def arrived_on_port(environ: Mapping[str, Any], port: int | None) -> bool:
    """True if the request came in on ``port`` of this host, by its socket."""
    sock = environ.get("gunicorn.socket") or environ.get("werkzeug.socket")
    if port is None or not isinstance(sock, socket.socket):
        return False
    try:
        local = sock.getsockname()
    except OSError:
        return False
    return isinstance(local, tuple) and local[1] == port


def _authorized(header: str, token: str) -> bool:
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )
