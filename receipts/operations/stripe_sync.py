"""What ``receipts backfill`` and ``receipts reconcile`` share: settings, scopes, recording.

Both read Stripe's API with a restricted key and ingest what they find through
the webhook's own derivation and statement (:func:`ingest_recorded`), so an
invoice gets the same message key and fingerprint however it arrives, and a
second run, or an invoice the webhook already stored, adds nothing.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from receipts import queries
from receipts.config import ConfigError, Settings, load_settings
from receipts.db import Connection
from receipts.dev.state import with_dev_database
from receipts.ingest.deriving import ReceiptDeriver
from receipts.ingest.store import IngestResult, ingest
from receipts.logs import configure_logging
from receipts.receipt.derivation import Decision
from receipts.receipt.event import EventHeader
from receipts.stripe_api.client import BATCH, Scope, StripeApi
from receipts.vocabulary import NOTIFY_CHANNEL

_DURATION = re.compile(r"(\d+)([mhd])")
_UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400}
_ACCOUNT = re.compile(r"acct_[A-Za-z0-9]{1,200}")
PROGRESS_EVERY_SECONDS = 5.0


def duration(text: str) -> int:
    """``30m``, ``72h`` or ``7d`` as seconds (argparse type)."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or int(match.group(1)) == 0:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 72h or 7d)")
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def account_id(text: str) -> str:
    """A Connect account id (argparse type)."""
    if not _ACCOUNT.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"not a Connect account id: {text!r} (acct_…)")
    return text.strip()


def scopes(accounts: list[str]) -> list[Scope]:
    """The platform, then each Connect account once, in the order given."""
    return [Scope(), *(Scope(account=account) for account in dict.fromkeys(accounts))]


@dataclass(frozen=True, kw_only=True)
class StripeSetup:
    """What a command that reads Stripe's API needs."""

    settings: Settings
    database_url: str
    deriver: ReceiptDeriver

    @property
    def api(self) -> StripeApi:
        assert self.deriver.api is not None
        return self.deriver.api


def stripe_setup(environ: Mapping[str, str], command: str, *, derives: bool) -> StripeSetup:
    """Settings with STRIPE_API_KEY (checked first) and DATABASE_URL; EMAIL_FROM if it derives."""
    settings = load_settings(environ)
    configure_logging(settings.log_format)
    if settings.stripe_api_key is None:
        raise ConfigError(
            "STRIPE_API_KEY",
            f"is not set; `receipts {command}` reads Stripe's API and needs a restricted key "
            "(README: Stripe API key)",
        )
    required = ("DATABASE_URL", "EMAIL_FROM") if derives else ("DATABASE_URL",)
    settings = load_settings(with_dev_database(environ), required=required)
    assert settings.database_url is not None
    api = StripeApi.from_settings(settings, BATCH)
    return StripeSetup(
        settings=settings,
        database_url=settings.database_url,
        deriver=ReceiptDeriver(settings, api),
    )


def ingest_recorded(
    conn: Connection, header: EventHeader, decision: Decision, *, source: str
) -> IngestResult:
    """The webhook's ingest, in the caller's transaction, with the event marked as ours."""
    result = ingest(conn, header, decision)
    if not result.redelivery:
        conn.execute(_Q["mark_event_source"], {"source": source, "event_id": header.event_id})
    return result


def wake_workers(conn: Connection) -> None:
    """Let a `receipts worker --loop` know rows were queued (it polls anyway)."""
    conn.execute(_Q["wake_workers"], {"channel": NOTIFY_CHANNEL})


class Progress:
    """Calls ``say`` with a line at most every few seconds, for long runs."""

    def __init__(self, say: Callable[[str], None] | None) -> None:
        self._say = say
        self._started = time.monotonic()
        self._last = self._started

    def tick(self, line: Callable[[], str]) -> None:
        now = time.monotonic()
        if self._say is not None and now - self._last >= PROGRESS_EVERY_SECONDS:
            self._last = now
            self._say(f"{line()} ({now - self._started:.0f} s)")


_Q = queries.load("stripe_api")
