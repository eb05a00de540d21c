"""``GET /healthz`` (the process answers) and ``GET /readyz`` (the database can take writes).

``/readyz`` answers 503 while PostgreSQL is unreachable, refuses writes (a
standby after a failover), lacks a migration this code ships, times out, or
cannot commit a write (a full disk, out of memory), naming the failing
dependency and a short reason, never the driver's message: the endpoint is
open to anyone. The reads run on every poll; the write is made at most once
every few seconds per process (:mod:`receipts.web.readiness`). The process
keeps running (``docs/architecture.md``, "Interface contract").
"""

from __future__ import annotations

import functools
import logging

from flask import Blueprint, Response, jsonify

from receipts.db import DatabaseUnavailable
from receipts.logs import log_fields
from receipts.migrations import load_migrations
from receipts.web.services import services

log = logging.getLogger(__name__)

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
def healthz() -> tuple[Response, int]:
    return jsonify(status="ok"), 200


@functools.cache
def _migration_versions() -> tuple[int, ...]:
    """The migrations this code expects applied (the files shipped with it)."""
    return tuple(migration.version for migration in load_migrations())


@blueprint.get("/readyz")
def readyz() -> tuple[Response, int]:
    svc = services()
    try:
        svc.database.check_ready(_migration_versions())
        svc.write_probe.check()
    except DatabaseUnavailable as exc:
        log_fields(log, "not ready", logging.WARNING, failing="database", reason=str(exc))
        return jsonify(status="unavailable", failing="database", reason=exc.reason), 503
    return jsonify(status="ready"), 200
