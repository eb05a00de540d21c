"""``GET /healthz`` (the process answers) and ``GET /readyz`` (it can reach the database).

``/readyz`` answers 503 and names the failing dependency while PostgreSQL is
unreachable; the process keeps running (``docs/architecture.md``,
"Interface contract").
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from receipts.db import DatabaseUnavailable
from receipts.web.services import services

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
def healthz() -> tuple[Response, int]:
    return jsonify(status="ok"), 200


@blueprint.get("/readyz")
def readyz() -> tuple[Response, int]:
    try:
        services().database.ping()
    except DatabaseUnavailable as exc:
        return jsonify(status="unavailable", failing="database", error=str(exc)), 503
    return jsonify(status="ready"), 200
