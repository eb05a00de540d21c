"""What the web routes need, built once per app, and the one typed way to reach it.

:func:`init_app` builds the :class:`Services` of an app and keeps them in
``app.extensions``; a route calls :func:`services` and gets them typed. Nothing
connects here: the pool opens on first use, so the web process starts while the
database is down (``docs/architecture.md``, "Interface contract").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from flask import Flask, current_app
from standardwebhooks import Webhook

from receipts.config import Settings
from receipts.db import Database
from receipts.ingest.delivery_events import signature_verifier
from receipts.ingest.deriving import IN_REQUEST_BUDGET_SECONDS, ReceiptDeriver
from receipts.ingest.thin_events import ThinEvents
from receipts.ingest.wakeup import WakeUp
from receipts.stripe_api.client import IN_REQUEST, StripeApi
from receipts.vocabulary import NOTIFY_CHANNEL
from receipts.web.readiness import WriteProbe

_EXTENSION = "receipts"


@dataclass(frozen=True, kw_only=True)
class Services:
    """The settings, the database pool and the helpers the routes share."""

    settings: Settings
    database: Database
    wake_up: WakeUp
    resend_verifier: Webhook | None  # None: Resend delivery webhooks not configured
    deriver: ReceiptDeriver  # invoice -> receipt decision, with the Stripe API's facts if keyed
    thin_events: ThinEvents
    write_probe: WriteProbe  # /readyz: can a write commit (the verdict kept a few seconds)

    @classmethod
    def from_settings(
        cls, settings: Settings, *, clock: Callable[[], float] = time.monotonic
    ) -> Services:
        """Build them; a malformed setting raises ConfigError naming the variable.

        ``clock`` (monotonic seconds) is what the readiness verdict is kept by and the
        look-up budget of a webhook counted with.
        """
        assert settings.database_url is not None
        database = Database(
            settings.database_url,
            max_size=settings.pool_max_size,
            timeout=settings.database_timeout,
            work_timeout=settings.statement_timeout,
            prepared_statements=settings.prepared_statements,
        )
        wake_up = WakeUp(database.url, NOTIFY_CHANNEL)
        api = StripeApi.from_settings(settings, IN_REQUEST)
        deriver = ReceiptDeriver(
            settings, api, budget_seconds=IN_REQUEST_BUDGET_SECONDS, clock=clock
        )
        return cls(
            settings=settings,
            database=database,
            wake_up=wake_up,
            resend_verifier=signature_verifier(settings.resend_webhook_secret),
            deriver=deriver,
            thin_events=ThinEvents(database, deriver, wake_up),
            write_probe=WriteProbe(database, clock=clock),
        )


def init_app(
    app: Flask, settings: Settings, *, clock: Callable[[], float] = time.monotonic
) -> Services:
    """Build the app's services and keep them on the app."""
    built = Services.from_settings(settings, clock=clock)
    app.extensions[_EXTENSION] = built
    return built


def services() -> Services:
    """The current app's services (inside a request or an app context)."""
    found = current_app.extensions[_EXTENSION]
    assert isinstance(found, Services)
    return found
