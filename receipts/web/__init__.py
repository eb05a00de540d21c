"""The web process: an app factory with the webhook, health and metrics routes."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping

from flask import Blueprint, Flask, Response, current_app, jsonify, request

from receipts.config import WEB_REQUIRES, Settings, load_settings
from receipts.db import Database, DatabaseUnavailable
from receipts.ingest.deriving import IN_REQUEST_BUDGET_SECONDS, ReceiptDeriver
from receipts.ingest.events import RejectedDelivery, decode_event, verify_signature
from receipts.ingest.receipt import MalformedEvent
from receipts.ingest.rendering import Renderer
from receipts.ingest.store import IngestResult, ingest
from receipts.ingest.thin_events import ThinEvents, looks_thin
from receipts.ingest.wakeup import WakeUp
from receipts.logs import log_fields
from receipts.stripe_api.client import IN_REQUEST, StripeApi
from receipts.vocabulary import NOTIFY_CHANNEL
from receipts.web import metrics
from receipts.web import resend_webhooks as delivery_webhooks

log = logging.getLogger("receipts.web")

stripe_webhooks = Blueprint("stripe_webhooks", __name__)
health = Blueprint("health", __name__)


class Services:
    """What the routes need, built once per app."""

    def __init__(self, settings: Settings, database: Database) -> None:
        self.settings = settings
        self.database = database
        self.renderer = Renderer(locale=settings.locale, template_dir=settings.template_dir)
        self.wake_up = WakeUp(database.url, NOTIFY_CHANNEL)
        api = StripeApi.from_settings(settings, IN_REQUEST)
        self.deriver = ReceiptDeriver(
            settings, self.renderer, api, budget_seconds=IN_REQUEST_BUDGET_SECONDS
        )
        self.thin_events = ThinEvents(database, self.deriver, self.wake_up)


def create_app(
    settings: Settings | None = None, *, environ: Mapping[str, str] | None = None
) -> Flask:
    """Build the WSGI app. Nothing connects here: the pool opens on first use."""
    if settings is None:
        settings = load_settings(os.environ if environ is None else environ, required=WEB_REQUIRES)
    assert settings.database_url is not None
    app = Flask("receipts")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    database = Database(
        settings.database_url,
        max_size=settings.pool_max_size,
        timeout=settings.database_timeout,
    )
    app.extensions["receipts"] = Services(settings, database)
    app.register_blueprint(stripe_webhooks)
    app.register_blueprint(health)
    delivery_webhooks.init_app(app, settings)
    metrics.init_app(app, settings, database)
    app.register_error_handler(413, _too_large)
    return app


def services() -> Services:
    found: Services = current_app.extensions["receipts"]
    return found


def _too_large(_error: Exception) -> tuple[Response, int]:
    return jsonify(error="body too large"), 413


@stripe_webhooks.post("/webhooks/stripe")
def receive_stripe_event() -> tuple[Response, int]:
    started = time.perf_counter()
    try:
        response, status, event_type, outcome = _handle_stripe_event(started)
    except Exception:
        # Flask answers 500; count it so the 5xx alert sees it.
        metrics.count_webhook("stripe", "unknown", "error", 500, started)
        raise
    metrics.count_webhook("stripe", event_type, outcome, status, started)
    return response, status


def _handle_stripe_event(started: float) -> tuple[Response, int, str, str]:
    """Answer one delivery; also return its event type and outcome for the metrics."""
    svc = services()
    body = request.get_data(cache=False)
    try:
        text = verify_signature(
            body, request.headers.get("Stripe-Signature"), svc.settings.stripe_webhook_secrets
        )
        if looks_thin(text):
            thin = svc.thin_events.receive(text)
            return jsonify(thin.body), thin.status, thin.event_type, thin.outcome
        header, _event = decode_event(text)
        decision = svc.deriver.derive(header)
    except RejectedDelivery as rejected:
        log_fields(
            log,
            "stripe webhook rejected",
            logging.WARNING,
            status=rejected.status,
            reason=rejected.reason,
        )
        return jsonify(error=rejected.reason), rejected.status, "unknown", "rejected"
    except MalformedEvent as exc:
        log_fields(log, "stripe webhook rejected", logging.WARNING, status=400, reason=str(exc))
        return (
            jsonify(error=f"not a usable invoice event: {exc}"),
            400,
            header.event_type,
            "malformed",
        )
    try:
        with svc.database.autocommit() as conn:
            result = ingest(conn, header, decision)
        if result.outcome == "queued":
            svc.wake_up.poke()
    except DatabaseUnavailable as exc:
        log_fields(
            log,
            "stripe webhook not stored",
            logging.ERROR,
            event_id=header.event_id,
            reason=str(exc),
        )
        return (
            jsonify(error="database unavailable, retry later"),
            503,
            header.event_type,
            "unavailable",
        )
    _log_result(result, header.event_type, started)
    return (
        jsonify(received=True, outcome=result.outcome, message_key=result.message_key),
        200,
        header.event_type,
        "redelivery" if result.redelivery else result.outcome,
    )


def _log_result(result: IngestResult, event_type: str, started: float) -> None:
    level = logging.WARNING if result.outcome in ("conflict", "review") else logging.INFO
    log_fields(
        log,
        "stripe webhook",
        level,
        event_id=result.event_id,
        type=event_type,
        outcome=result.outcome,
        key=result.message_key,
        detail=result.detail,
        redelivery=result.redelivery or None,
        ms=round((time.perf_counter() - started) * 1000, 1),
    )


@health.get("/healthz")
def healthz() -> tuple[Response, int]:
    return jsonify(status="ok"), 200


@health.get("/readyz")
def readyz() -> tuple[Response, int]:
    try:
        services().database.ping()
    except DatabaseUnavailable as exc:
        return jsonify(status="unavailable", failing="database", error=str(exc)), 503
    return jsonify(status="ready"), 200
