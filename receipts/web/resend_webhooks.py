"""``POST /webhooks/resend``: Resend's delivery events for the receipts it sent.

Only the HTTP side lives here: verification, parsing and recording are in
:mod:`receipts.ingest.delivery_events`. A delivery is answered 503 while
``RESEND_WEBHOOK_SECRET`` is unset, 400 when its signature or body is not
Resend's, 503 while the database is down (Resend retries) and 200 otherwise,
including for a redelivered event or an email id we do not know.
"""

from __future__ import annotations

import logging
import time

from flask import Blueprint, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from receipts.db import DatabaseUnavailable
from receipts.ingest.delivery_events import (
    DELIVERY_STATUSES,
    EVIDENCE_TYPES,
    SIGNATURE_HEADERS,
    DeliveryEvent,
    record_delivery_event,
    verified_event,
)
from receipts.ingest.verification import RejectedDelivery
from receipts.logs import log_fields
from receipts.vocabulary import NOT_DELIVERED
from receipts.web import metrics
from receipts.web.bodies import BodyRefused, read_body
from receipts.web.services import services

log = logging.getLogger(__name__)

blueprint = Blueprint("resend_webhooks", __name__)

_UNCONFIGURED = "Resend delivery webhooks are not configured: set RESEND_WEBHOOK_SECRET"


@blueprint.post("/webhooks/resend")
def receive_resend_event() -> tuple[Response, int]:
    started = time.perf_counter()
    event_type = "unknown"
    if services().resend_verifier is None:
        return _refused(503, _UNCONFIGURED, "unconfigured", started)
    try:
        event = _verified_event()
        event_type = metrics.event_type_label(event.event_type, EVIDENCE_TYPES)
        with services().database.transaction() as conn:
            outcome = record_delivery_event(conn, event)
    except BodyRefused as refused:
        return _refused(refused.status, refused.reason, "rejected", started)
    except RejectedDelivery as rejected:
        return _refused(400, rejected.reason, "rejected", started)
    except DatabaseUnavailable as exc:
        log_fields(log, "resend webhook not stored", logging.ERROR, reason=str(exc))
        metrics.count_webhook("resend", event_type, "unavailable", 503, started)
        return jsonify(error="database unavailable, retry later"), 503
    except HTTPException as error:
        metrics.count_webhook("resend", event_type, "rejected", error.code or 500, started)
        raise
    except Exception:
        metrics.count_webhook("resend", event_type, "error", 500, started)
        raise
    log_fields(
        log,
        "resend webhook",
        _level(event, outcome),
        svix_id=event.svix_id,
        type=event.event_type,
        email_id=event.email_id,
        outcome=outcome,
        detail=event.detail,
        ms=round((time.perf_counter() - started) * 1000, 1),
    )
    metrics.count_webhook("resend", event_type, outcome, 200, started)
    return jsonify(received=True, outcome=outcome), 200


def _refused(status: int, reason: str, label: str, started: float) -> tuple[Response, int]:
    log_fields(log, "resend webhook rejected", logging.WARNING, status=status, reason=reason)
    metrics.count_webhook("resend", "unknown", label, status, started)
    return jsonify(error=reason), status


def _level(event: DeliveryEvent, outcome: str) -> int:
    """WARNING for what a person may have to act on: a receipt the customer did not
    get, a send nobody recorded, an email nobody knows."""
    status = DELIVERY_STATUSES.get(event.event_type)
    if outcome in ("unknown_email", "evidence") or (
        outcome == "applied" and status in NOT_DELIVERED
    ):
        return logging.WARNING
    return logging.INFO


def _verified_event() -> DeliveryEvent:
    svc = services()
    verifier = svc.resend_verifier
    assert verifier is not None
    body = read_body(
        request.environ,
        limit=svc.settings.max_body_bytes,
        timeout=svc.settings.body_timeout,
    )
    headers = {name: request.headers.get(name, "") for name in SIGNATURE_HEADERS}
    return verified_event(verifier, body, headers)
