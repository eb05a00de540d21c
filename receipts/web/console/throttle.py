"""Failed logins, counted in the database for every web process alike.

After :data:`MAX_FAILURES` failed logins for one user name (known or not) or
from one address within :data:`WINDOW`, further logins for it are refused
with 429 and ``Retry-After`` until enough of those failures are older than
the window, whether the password given then is right or not. A success does
not clear the count: only time does. The client's address is the socket's
peer, or with ``RECEIPTS_CONSOLE_PROXY_HOPS=N`` the N-th address from the
right of ``X-Forwarded-For`` (the one the nearest trusted proxy saw).
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from flask import Request

from receipts import queries
from receipts.db import Connection

MAX_FAILURES = 10
WINDOW = timedelta(minutes=15)
FIELD_LENGTH = 64  # the table's limit for a user name and an address

_CONSOLE = queries.load("console")


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """Who a login is for and where it comes from, as the throttle counts them."""

    user_name: str
    address: str


def attempt_of(request: Request, typed_name: str, proxy_hops: int) -> Attempt:
    return Attempt(user_name=typed_name[:FIELD_LENGTH], address=client_address(request, proxy_hops))


def client_address(request: Request, proxy_hops: int) -> str:
    peer = request.remote_addr or "unknown"
    if proxy_hops:
        forwarded = [part.strip() for part in request.headers.get("X-Forwarded-For", "").split(",")]
        forwarded = [part for part in forwarded if part]
        if len(forwarded) >= proxy_hops:
            candidate = forwarded[-proxy_hops]
            try:
                return str(ipaddress.ip_address(candidate))[:FIELD_LENGTH]
            except ValueError:
                pass  # not an address: a client wrote it, so count the peer
    return peer[:FIELD_LENGTH]


def seconds_blocked(conn: Connection, attempt: Attempt, now: datetime) -> int | None:
    """Seconds until a login for ``attempt`` is allowed again, or None if it is now."""
    found = conn.execute(
        _CONSOLE["login_failures"],
        {
            "user_name": attempt.user_name,
            "address": attempt.address,
            "since": now - WINDOW,
            "limit": MAX_FAILURES,
        },
    ).fetchone()
    assert found is not None
    blockers: list[datetime | None] = [found["user_blocked_by"], found["address_blocked_by"]]
    until = [blocker + WINDOW for blocker in blockers if blocker is not None]
    if not until:
        return None
    return max(1, math.ceil((max(until) - now).total_seconds()))


def record_failure(conn: Connection, attempt: Attempt, now: datetime) -> None:
    conn.execute(_CONSOLE["forget_old_login_failures"], {"before": now - WINDOW})
    conn.execute(
        _CONSOLE["record_login_failure"],
        {"user_name": attempt.user_name, "address": attempt.address, "failed_at": now},
    )
