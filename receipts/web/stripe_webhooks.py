"""``POST /webhooks/stripe``: one verified Stripe delivery, stored once, answered fast.

Verify the signature over the raw body, derive the receipt (a pure function),
store the event and its outbox row in one statement, then wake the workers
after the commit (``docs/architecture.md``, "Data flow"). A bad signature or
an unusable event is a 400 and stores nothing; a database outage is a 503 so
that Stripe retries; everything else is a 200, duplicates and conflicts too.
An event whose look-ups in Stripe's API ran past the request's budget is
held for the sweep (``receipts backfill``) and answered 503: nothing is
stored from what the budget cut short.
"""

from __future__ import annotations

import logging
import time

from flask import Blueprint, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from receipts.db import DatabaseUnavailable
from receipts.ingest.store import IngestResult, ingest
from receipts.ingest.thin_events import ThinOutcome, ThinState
from receipts.ingest.thin_notifications import looks_thin
from receipts.ingest.verification import RejectedDelivery, decode_event, verify_signature
from receipts.logs import log_fields
from receipts.receipt.derivation import Decision
from receipts.receipt.event import EventHeader, MalformedEvent
from receipts.stripe_api.client import ApiError, OutOfTime
from receipts.vocabulary import IngestOutcome
from receipts.web import metrics
from receipts.web.bodies import BodyRefused, read_body
from receipts.web.services import Services, services

log = logging.getLogger(__name__)

blueprint = Blueprint("stripe_webhooks", __name__)

# (response, HTTP status, event type label, outcome label for the metrics)
_Answer = tuple[Response, int, str, str]


@blueprint.post("/webhooks/stripe")
def receive_stripe_event() -> tuple[Response, int]:
    started = time.perf_counter()
    try:
        response, status, event_type, outcome = _handle_stripe_event(started)
    except HTTPException as error:
        metrics.count_webhook("stripe", "unknown", "rejected", error.code or 500, started)
        raise
    except Exception:
        # Flask answers 500; count it so the 5xx alert sees it.
        metrics.count_webhook("stripe", "unknown", "error", 500, started)
        raise
    metrics.count_webhook("stripe", event_type, outcome, status, started)
    return response, status


def _handle_stripe_event(started: float) -> _Answer:
    """Answer one delivery; also return its event type and outcome for the metrics."""
    svc = services()
    try:
        body = read_body(
            request.environ,
            limit=svc.settings.max_body_bytes,
            timeout=svc.settings.body_timeout,
        )
        text = verify_signature(
            body, request.headers.get("Stripe-Signature"), svc.settings.stripe_webhook_secrets
        )
        if looks_thin(text):
            return _thin_answer(svc.thin_events.receive(text), started)
        header, event = decode_event(text)
        decision = _derive(svc, header)
    except OutOfTime:
        return _thin_answer(svc.thin_events.hold(header, event), started, "stripe webhook")
    except ApiError as failed:
        return _lookup_failed(header, failed)
    except BodyRefused as refused:
        return _rejected(refused.status, refused.reason)
    except RejectedDelivery as rejected:
        return _rejected(400, rejected.reason)
    except MalformedEvent as exc:
        log_fields(log, "stripe webhook rejected", logging.WARNING, status=400, reason=str(exc))
        return (
            jsonify(error=f"not a usable invoice event: {exc}"),
            400,
            header.event_type,
            "malformed",
        )
    return _store(svc, header, decision, started)


def _lookup_failed(header: EventHeader, failed: ApiError) -> _Answer:
    """A refund or credit note whose look-ups failed: 503, so Stripe delivers it again."""
    log_fields(log, "stripe webhook: look-up failed", logging.ERROR, event_id=header.event_id,
               type=header.event_type, reason=str(failed))  # fmt: skip
    answer = jsonify(error="Stripe's API could not be read, retry later")
    return answer, 503, header.event_type, "unavailable"


def _rejected(status: int, reason: str) -> _Answer:
    log_fields(log, "stripe webhook rejected", logging.WARNING, status=status, reason=reason)
    return jsonify(error=reason), status, "unknown", "rejected"


def _thin_answer(thin: ThinOutcome, started: float, what: str = "stripe thin event") -> _Answer:
    """200 once the event is recorded; 503 while it waits for the API, so Stripe retries."""
    if thin.state == ThinState.RECORDED:
        status = 200
        body = {"received": True, "outcome": thin.outcome, "message_key": thin.message_key}
    elif thin.state == ThinState.PENDING:
        status, body = 503, {"error": f"{thin.detail}; the event is stored, retry later"}
    else:
        status, body = 503, {"error": "database unavailable, retry later"}
    level = logging.INFO
    if status >= 500:
        # Held past the look-up budget: the sweep finishes it, nothing failed.
        level = logging.WARNING if thin.outcome == "out_of_time" else logging.ERROR
    elif thin.outcome in (IngestOutcome.CONFLICT, IngestOutcome.REVIEW):
        level = logging.WARNING
    log_fields(log, what, level, event_id=thin.event_id, type=thin.event_type,
               status=status, outcome=thin.outcome, key=thin.message_key, detail=thin.detail,
               ms=round((time.perf_counter() - started) * 1000, 1))  # fmt: skip
    label = "redelivery" if thin.redelivery else thin.outcome
    return jsonify(body), status, thin.event_type, label


def _derive(svc: Services, header: EventHeader) -> Decision:
    try:
        return svc.deriver.derive(header)
    except (MalformedEvent, ApiError):
        raise
    except Exception as exc:
        # A pure function of a verified event failed on a value it does not
        # expect (an amount no formatter can print, say). That is a 400 with
        # the event id in the log, never a 500 Stripe would retry for days.
        # Only the error's type is logged: its message may quote customer data.
        log_fields(
            log,
            "stripe webhook: no receipt could be derived",
            logging.ERROR,
            event_id=header.event_id,
            error=type(exc).__name__,
        )
        raise MalformedEvent("its values cannot make a receipt") from exc


def _store(svc: Services, header: EventHeader, decision: Decision, started: float) -> _Answer:
    """Store the delivery; wake the workers once a new pending row is committed."""
    try:
        with svc.database.autocommit() as conn:
            result = ingest(conn, header, decision)
        if result.outcome == IngestOutcome.QUEUED:
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
        jsonify(
            received=True,
            outcome=result.outcome,
            message_key=result.message_key,
            redelivery=result.redelivery,
        ),
        200,
        header.event_type,
        "redelivery" if result.redelivery else result.outcome,
    )


def _log_result(result: IngestResult, event_type: str, started: float) -> None:
    attention = (IngestOutcome.CONFLICT, IngestOutcome.REVIEW)
    level = logging.WARNING if result.outcome in attention else logging.INFO
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
