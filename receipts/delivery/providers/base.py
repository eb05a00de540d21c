"""What every provider is: one send, its answer table, its guarantee, and a lookup.

A provider takes the message key and the frozen payload exactly as stored
(JSON bytes) and returns a :class:`~receipts.delivery.answers.ProviderAnswer`:
the facts of the answer, or the name of the network failure when none came.
What each answer does is decided in ``receipts.delivery.decisions`` with the
provider's own table (``receipts.delivery.rules``). Each provider states its
:class:`Guarantee`: how it keeps a retry from becoming a second email, for
how long, and whether it can be asked "did you already accept this one?"
(:meth:`Provider.look_up`). Providers never touch the database.
docs/architecture.md, "Providers and their guarantees".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol, runtime_checkable

from receipts.delivery.answers import BatchAnswer, ProviderAnswer
from receipts.delivery.rules import AnswerTable


class Protection(StrEnum):
    """How a provider keeps a retry of an accepted send from becoming a second email."""

    IDEMPOTENCY_KEY = "idempotency_key"  # it replays the key's first answer
    SEARCH = "search"  # it can be asked whether it accepted the key, before a retry
    NONE = "none"  # neither: an ambiguous send goes to a person


@dataclass(frozen=True, kw_only=True)
class Guarantee:
    """What a provider promises, stated for the README's table and ``receipts doctor``."""

    protection: Protection
    window_hours: float | None  # how long the protection holds (None: no window)
    can_look_up: bool  # look_up() can find an accepted message (sent list, search)
    lookup_lag_seconds: float = 0.0  # how long after acceptance a lookup can see a message
    # A retry answer without a reply (timeout, connection lost, 5xx, 2xx without an
    # id) may hide an accepted send. False for SMTP: its ambiguous sends never retry.
    retry_may_hide_acceptance: bool = True

    def line(self) -> str:
        """One line for people: what protects against a duplicate, and for how long."""
        if self.protection == Protection.IDEMPOTENCY_KEY:
            window = f"{self.window_hours:g} h" if self.window_hours else "ever"
            found = "; then its sent list is searched" if self.can_look_up else ""
            return f"idempotency key, kept {window}{found}"
        if self.protection == Protection.SEARCH:
            days = (self.window_hours or 0) / 24
            return (
                f"searched by message key before any retry (after {self.lookup_lag_seconds:g} s), "
                f"while it keeps messages ({days:g} days)"
            )
        return "none: a send whose outcome is unknown goes to review, never retried"


@dataclass(frozen=True, kw_only=True)
class Lookup:
    """What the provider said when asked whether it accepted a message.

    ``provider_id`` is set when it did. ``error`` names why no answer came
    (``permanent``: asking again cannot help, for instance a key that may not
    list emails). ``fix`` is set when the refusal is our configuration's (a
    bad token), the same for every receipt: the run stops naming it.
    ``searched`` says, for the attempt log, what was asked.
    """

    provider_id: str | None = None
    error: str | None = None
    http_status: int | None = None
    permanent: bool = False
    fix: str | None = None
    searched: str = ""

    @property
    def found(self) -> bool:
        return self.provider_id is not None


NOT_SUPPORTED = Lookup(error="lookup_not_supported", permanent=True, searched="nothing to ask")


class Provider(Protocol):
    """Sends one frozen message; must be safe to call from several threads."""

    name: str
    default_rate: float  # requests per second when RECEIPTS_SEND_RATE is unset (0: no cap)
    guarantee: Guarantee
    answers: AnswerTable  # what each of its answers does (receipts.delivery.rules)

    def send(self, message_key: str, payload: bytes) -> ProviderAnswer: ...

    def look_up(
        self, message_key: str, payload: bytes, *, since: datetime, deadline: float
    ) -> Lookup:
        """Whether the provider accepted this message since ``since``; ``deadline``
        is a ``time.monotonic()`` value no request may outlast."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class BatchProvider(Protocol):
    """A provider that also takes several frozen messages in one request, under one
    Idempotency-Key for the whole batch (Resend's ``POST /emails/batch``)."""

    max_batch: int  # the most messages one request may carry

    def send_batch(self, batch_key: str, body: bytes, size: int) -> BatchAnswer:
        """Send ``body`` (a JSON array of ``size`` frozen messages) under ``batch_key``."""
        ...


def batch_limit(provider: Provider) -> int:
    """How many messages this provider takes in one request (1: it sends singly)."""
    return provider.max_batch if isinstance(provider, BatchProvider) else 1
