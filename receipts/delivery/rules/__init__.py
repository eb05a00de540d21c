"""Each provider's answer table: what any answer it can give is.

A table turns one :class:`~receipts.delivery.answers.ProviderAnswer` into a
:class:`Rule`: ``sent``, ``retry`` (attempt counted), ``rate_limited`` or
``quota`` (attempt refunded: not the message's fault), ``review`` (a problem
of this message), or ``configuration`` (refunded, and the run stops with exit
code 2 naming the setting to fix). ``receipts.delivery.decisions.decide``
makes the rest of the decision (delays, pauses, the run) the same way for
every provider. One module per provider, each with every error its
documentation lists: ``resend``, ``postmark``, ``smtp``.
docs/architecture.md, "What each provider answer does".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from receipts.delivery.answers import ProviderAnswer


class Reaction(StrEnum):
    SENT = "sent"
    RETRY = "retry"
    RATE_LIMITED = "rate_limited"
    QUOTA = "quota"
    REVIEW = "review"
    CONFIGURATION = "configuration"


@dataclass(frozen=True)
class Rule:
    """What an answer is, and for a configuration error the setting to fix."""

    reaction: Reaction
    fix: str | None = None


@dataclass(frozen=True, kw_only=True)
class AnswerTable:
    """A provider's answers, for ``decide``."""

    provider: str
    reaction_to: Callable[[ProviderAnswer], Rule]
    # A retry after an answer that may hide an accepted send waits at least this
    # long (Postmark: until its search can see the message).
    retry_floor_seconds: float = 0.0
    # The provider states its rate limit per this many seconds (ratelimit-* headers).
    rate_window_seconds: float = 1.0
