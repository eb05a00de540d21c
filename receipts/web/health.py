"""``GET /healthz`` (the process answers) and ``GET /readyz`` (the database can take writes).

``/readyz`` answers 503 while PostgreSQL is unreachable, refuses writes (a
standby after a failover) or times out, naming the failing dependency and a
short reason, never the driver's message: the endpoint is open to anyone. The
process keeps running (``docs/architecture.md``, "Interface contract").
"""

from __future__ import annotations

import logging

from flask import Blueprint, Response, jsonify

from receipts.db import DatabaseUnavailable
from receipts.logs import log_fields
from receipts.web.services import services

log = logging.getLogger(__name__)

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
def healthz() -> tuple[Response, int]:
    return jsonify(status="ok"), 200


@blueprint.get("/readyz")
def readyz() -> tuple[Response, int]:
    try:
        services().database.check_ready()
    except DatabaseUnavailable as exc:
        log_fields(log, "not ready", logging.WARNING, failing="database", reason=str(exc))
        return jsonify(status="unavailable", failing="database", reason=exc.reason), 503
    return jsonify(status="ready"), 200
