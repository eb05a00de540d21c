"""The review queue, and what every decision a person takes shares.

:func:`list_review` reads the receipts waiting for a person. The decisions
themselves (``resolve``, ``retry``, ``dismiss`` in
:mod:`receipts.operations.review_decisions`, ``resend`` in
:mod:`receipts.operations.resending`) each run in the caller's transaction
and raise :class:`Refused` when they do not apply, so the transaction rolls
back and nothing changes; each records an operator action (who, when, why)
with :func:`record_action`. The statements are in
``receipts/queries/review.sql``; which decision applies from which state is
in ``docs/architecture.md``, "Operator decisions".

A receipt in review needs a person until it is *settled*: dismissed (reason
:attr:`ReviewReason.DISMISSED`, no email will be sent) or resent (its
``resent_as`` names the resend that carries its email).
"""

from __future__ import annotations

import functools
import getpass
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

from psycopg.types.json import Jsonb

from receipts import queries
from receipts.db import Connection
from receipts.message_keys import provider_tag
from receipts.operations.operator_input import InvalidInput, operator
from receipts.vocabulary import NOTIFY_CHANNEL, ReviewReason

_REVIEW = queries.load("review")


def operator_name(environ: Mapping[str, str], by: str | None = None) -> str:
    """Who is deciding: ``--by`` if given, else RECEIPTS_OPERATOR, else the OS user.

    InvalidInput when ``--by`` or RECEIPTS_OPERATOR is given but is not a name on
    one line; a blank variable counts as unset.
    """
    if by is not None:
        return operator(by, source="--by")
    for name in ("RECEIPTS_OPERATOR", "USER", "LOGNAME"):
        if environ.get(name, "").strip():
            return operator(environ[name], source=name)
    try:
        return operator(getpass.getuser(), source="the OS user name")
    except (KeyError, OSError, InvalidInput):
        return "unknown"


class Refused(Exception):
    """The decision does not apply to this receipt; the message says why."""


_P = ParamSpec("_P")
_R = TypeVar("_R")


def one_transaction(
    decision: Callable[Concatenate[Connection, _P], _R],
) -> Callable[Concatenate[Connection, _P], _R]:
    """The decision runs in one transaction (a savepoint inside the caller's): its
    locks hold until the end, and a refusal takes back everything it did."""

    @functools.wraps(decision)
    def decide(conn: Connection, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with conn.transaction():
            return decision(conn, *args, **kwargs)

    return decide


@dataclass(frozen=True, kw_only=True)
class Decider:
    """Who decides, and why: recorded with every change."""

    performed_by: str
    reason: str


def record_action(
    conn: Connection,
    key: str,
    action: str,
    decider: Decider,
    details: dict[str, Any] | None = None,
) -> None:
    """Record who decided what about a receipt, when and why."""
    conn.execute(
        _REVIEW["record_operator_action"],
        {
            "key": key,
            "action": action,
            "performed_by": decider.performed_by,
            "reason": decider.reason,
            "details": Jsonb(details or {}),
        },
    )


def list_review(
    conn: Connection, *, reason: str | None = None, include_settled: bool = False
) -> list[dict[str, Any]]:
    """Review rows, oldest first; settled ones (dismissed, resent) only when asked for.

    ``evidence``: the emails Resend reported with the row's tag that no
    receipt recorded (``{"email_id", "accepted_at"}``, earliest first): it was
    sent, and ``receipts review resolve`` with that id is the decision to
    offer. ``provider_reported_send`` says whether there is any.
    """
    rows = conn.execute(
        _REVIEW["list_review_rows"],
        {"reason": reason, "all": include_settled, "dismissed": ReviewReason.DISMISSED},
    ).fetchall()
    evidence = evidence_of_unrecorded_sends(conn, [row["message_key"] for row in rows])
    for row in rows:
        row["evidence"] = evidence.get(row["message_key"], [])
        row["provider_reported_send"] = bool(row["evidence"])
    return rows


def count_settled(conn: Connection, *, reason: str | None = None) -> dict[str, int]:
    """``{"resent": n, "dismissed": n}``: review rows that need nobody (of ``reason``)."""
    found: dict[str, int] | None = conn.execute(
        _REVIEW["count_settled_review_rows"],
        {"reason": reason, "dismissed": ReviewReason.DISMISSED},
    ).fetchone()
    return found or {"resent": 0, "dismissed": 0}


def evidence_of_unrecorded_sends(
    conn: Connection, keys: list[str]
) -> dict[str, list[dict[str, Any]]]:
    """By receipt: the emails Resend accepted for it that it never recorded."""
    if not keys:
        return {}
    by_tag = {provider_tag(key): key for key in keys}
    found: dict[str, list[dict[str, Any]]] = {}
    for row in conn.execute(
        _REVIEW["evidence_of_unrecorded_sends"], {"keys": keys, "tags": list(by_tag)}
    ):
        key = row["message_key"] or by_tag.get(row["message_tag"])
        if key is None:
            continue
        sends = found.setdefault(key, [])
        if all(send["email_id"] != row["email_id"] for send in sends):
            sends.append({"email_id": row["email_id"], "accepted_at": row["accepted_at"]})
    return found


def wake_workers(conn: Connection) -> None:
    """Idle workers pick the row up as soon as the decision commits."""
    conn.execute(_REVIEW["wake_workers"], {"channel": NOTIFY_CHANNEL})
