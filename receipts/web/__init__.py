"""The web process: the app factory. Each route family has its own module.

``stripe_webhooks`` (``POST /webhooks/stripe``), ``resend_webhooks``
(``POST /webhooks/resend``), ``health`` (``/healthz``, ``/readyz``) and
``metrics`` (``/metrics``); ``services`` holds what they share. The support
console (``/console/``, package ``console``) is registered only when it has
users, and shares nothing with the other routes but the app. Nothing is
built at import time, and nothing connects in :func:`create_app`: the web
process starts while the database is down (``docs/architecture.md``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping

# Every delivery is verified with it (receipts.ingest.verification imports it where
# it is used): imported with the app, so preloaded workers share it.
import stripe  # noqa: F401
from flask import Flask, Response, jsonify
from werkzeug.exceptions import HTTPException

from receipts.config import WEB_REQUIRES, Settings, load_settings
from receipts.web import console, health, metrics, resend_webhooks, services, stripe_webhooks


def create_app(
    settings: Settings | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Flask:
    """Build the WSGI app. Nothing connects here: the pool opens on first use.

    ``clock`` (monotonic seconds) is the process's own; tests pass one they move.
    """
    if settings is None:
        settings = load_settings(os.environ if environ is None else environ, required=WEB_REQUIRES)
    app = Flask("receipts")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    shared = services.init_app(app, settings, clock=clock)
    app.register_blueprint(stripe_webhooks.blueprint)
    app.register_blueprint(health.blueprint)
    app.register_blueprint(resend_webhooks.blueprint)
    metrics.init_app(app, settings, shared.database)
    console.init_app(app, settings)
    app.register_error_handler(413, _too_large)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(500, _internal_error)
    return app


def _too_large(_error: Exception) -> tuple[Response, int]:
    return jsonify(error="body too large"), 413


def _http_error(error: HTTPException) -> tuple[Response, int]:
    """Every answer is a small JSON document, errors included (senders log the body)."""
    code = error.code or 500
    return jsonify(error=(error.name or "error").lower()), code


def _internal_error(_error: Exception) -> tuple[Response, int]:
    """An unexpected failure: still JSON, and never the exception's text."""
    return jsonify(error="internal error"), 500
