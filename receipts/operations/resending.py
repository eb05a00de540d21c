"""A deliberate second email for a receipt, under a new key (``receipts review resend``).

The copy is a new outbox row keyed ``<original key>/resend-<n>``: the worker
sends it like any other receipt, and the original row is left as it is. One
resend at a time: while one is still on its way, another is refused, since it
would be a third email. The statements are in ``receipts/queries/review.sql``.
"""

from __future__ import annotations

import re
from typing import Any

from psycopg.types.json import Jsonb

from receipts import queries
from receipts.addresses import is_email_address
from receipts.db import Connection
from receipts.message_keys import MAX_KEY_LENGTH, provider_tag
from receipts.operations.review import Decider, Refused, record_action, wake_workers
from receipts.vocabulary import RowStatus

_REVIEW = queries.load("review")
_RESEND_SUFFIX = re.compile(r"/resend-(\d+)\Z")
# A receipt in these states is still on its way to the provider.
_UNFINISHED = (RowStatus.PENDING, RowStatus.PROCESSING)


def resend(conn: Connection, key: str, decider: Decider, *, to: str | None = None) -> str:
    """Queue a deliberate second email under a new key; return that key.

    The original row is left as it is. The copy carries the same frozen email,
    or the same email to a new recipient with ``to``.
    """
    base = _RESEND_SUFFIX.sub("", key)
    locked = conn.execute(
        _REVIEW["lock_receipt_and_original"], {"original": base, "key": key}
    ).fetchall()
    row = next((found for found in locked if found["message_key"] == key), None)
    if row is None:
        raise Refused(f"no receipt with message key {key!r}")
    if row["status"] in _UNFINISHED:
        raise Refused(
            f"{key} is {row['status']}: it is still being sent, so a resend now would be a "
            "second email. Wait for it to be sent or reach review."
        )
    if row["payload"] is None:
        raise Refused(f"{key} has no frozen email ({row['review_reason']}): nothing to resend")
    if to is not None and not is_email_address(to):
        raise Refused(f"--to {to!r} is not an email address")
    _refuse_unsent_resend(conn, base)
    new_key = f"{_resend_prefix(base)}{_next_resend_number(conn, base)}"
    if len(new_key) > MAX_KEY_LENGTH:
        raise Refused(f"the resend key would exceed {MAX_KEY_LENGTH} characters")
    conn.execute(
        _REVIEW["insert_resend_row"],
        {
            "key": new_key,
            "purpose": row["purpose"],
            "account": row["account"],
            "livemode": row["livemode"],
            "invoice_id": row["invoice_id"],
            "source_event_id": row["source_event_id"],
            "fingerprint": row["fingerprint"],
            "payload": Jsonb(_resend_payload(row["payload"], new_key, to)),
            "invoice_number": row["invoice_number"],
            "customer_email": to or row["customer_email"],
            "amount": row["amount"],
            "currency": row["currency"],
        },
    )
    wake_workers(conn)
    changed = to is not None
    record_action(conn, key, "resend", decider, {"new_key": new_key, "recipient_changed": changed})
    record_action(
        conn, new_key, "resend_created", decider, {"resend_of": key, "recipient_changed": changed}
    )
    return new_key


def _refuse_unsent_resend(conn: Connection, base: str) -> None:
    """A resend still on its way makes another one a third email: refuse it."""
    waiting = conn.execute(_REVIEW["unsent_resend"], {"prefix": _resend_prefix(base)}).fetchone()
    if waiting is not None:
        raise Refused(
            f"{waiting['message_key']} is {waiting['status']}: a resend of this receipt is "
            "still on its way. Wait for it before resending again."
        )


def _next_resend_number(conn: Connection, base: str) -> int:
    numbers = [
        int(match.group(1))
        for found in conn.execute(_REVIEW["resend_keys"], {"prefix": _resend_prefix(base)})
        if (match := _RESEND_SUFFIX.search(found["message_key"]))
    ]
    return max(numbers, default=0) + 1


def _resend_prefix(base: str) -> str:
    """Keys of deliberate resends: ``<original key>/resend-<n>``."""
    return base + "/resend-"


def _resend_payload(payload: dict[str, Any], new_key: str, to: str | None) -> dict[str, Any]:
    copy = dict(payload)
    if to is not None:
        copy["to"] = [to]
    tags = [tag for tag in copy.get("tags") or [] if tag.get("name") != "message_key"]
    copy["tags"] = [*tags, {"name": "message_key", "value": provider_tag(new_key)}]
    return copy
