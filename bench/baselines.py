"""Reference web apps for ``bench/ingest.py``, served by the same gunicorn settings.

* ``bare()``: Flask answering 200, nothing else (the HTTP ceiling);
* ``minimal()``: ``verify_header`` + ``json.loads`` + one
  ``INSERT … ON CONFLICT DO NOTHING`` (the least any correct ingest must do);
* ``articles()``: ``stripe.Webhook.construct_event`` + the same insert, the
  shape most webhook tutorials use.

Not part of the package: run as ``gunicorn 'bench.baselines:minimal()'`` with
``DATABASE_URL`` and ``STRIPE_WEBHOOK_SECRET`` set, after
:data:`CREATE_TABLE` has been run in that database.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import stripe
from flask import Flask, request
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

CREATE_TABLE = """CREATE TABLE IF NOT EXISTS bench_ingest (
    message_key text PRIMARY KEY,
    event_id    text NOT NULL,
    invoice     jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now())"""

INSERT = """INSERT INTO bench_ingest (message_key, event_id, invoice) VALUES (%s, %s, %s)
            ON CONFLICT (message_key) DO NOTHING"""


def _app() -> Flask:
    app = Flask("baseline")
    app.add_url_rule("/healthz", "healthz", lambda: ("ok", 200))
    return app


class _Pool:
    """A pool opened on first use in each process.

    gunicorn.conf.py builds the app before forking the workers; a pool opened
    then would hand every worker the same connections, and its threads would
    not exist in the workers at all.
    """

    def __init__(self) -> None:
        self._pool: ConnectionPool[Any] | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def connection(self) -> Any:
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pid = os.getpid()
                self._pool = ConnectionPool(
                    os.environ["DATABASE_URL"],
                    min_size=1,
                    max_size=8,
                    kwargs={"autocommit": True},
                )
            pool = self._pool
        return pool.connection()


def _pool() -> _Pool:
    return _Pool()


def _store(pool: _Pool, event_id: str, invoice: dict[str, Any]) -> None:
    key = f"platform/test/{invoice['id']}/invoice-paid"
    with pool.connection() as conn:
        conn.execute(INSERT, (key, event_id, Jsonb(invoice)))


def bare() -> Flask:
    app = _app()
    app.add_url_rule("/webhooks/stripe", "bare", lambda: ("", 200), methods=["POST"])
    return app


def minimal() -> Flask:
    app = _app()
    secret = os.environ["STRIPE_WEBHOOK_SECRET"]
    pool = _pool()

    def receive() -> tuple[str, int]:
        text = request.get_data().decode("utf-8")
        header = request.headers.get("Stripe-Signature", "")
        try:
            stripe.WebhookSignature.verify_header(text, header, secret, 300)
        except stripe.SignatureVerificationError:
            return "bad signature", 400
        event = json.loads(text)
        _store(pool, event["id"], event["data"]["object"])
        return "", 200

    app.add_url_rule("/webhooks/stripe", "minimal", receive, methods=["POST"])
    return app


def articles() -> Flask:
    app = _app()
    secret = os.environ["STRIPE_WEBHOOK_SECRET"]
    pool = _pool()

    def receive() -> tuple[str, int]:
        payload = request.get_data()
        header = request.headers.get("Stripe-Signature", "")
        try:
            event = stripe.Webhook.construct_event(payload, header, secret)
        except (ValueError, stripe.SignatureVerificationError):
            return "bad request", 400
        invoice = event["data"]["object"].to_dict()
        _store(pool, event["id"], invoice)
        return "", 200

    app.add_url_rule("/webhooks/stripe", "articles", receive, methods=["POST"])
    return app
