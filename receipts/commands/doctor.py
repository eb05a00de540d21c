"""``receipts doctor [--json] [--no-cache]``: everything a deploy can get wrong, checked now.

One line per check, ``ok|FAIL name: detail``, exit 1 when any failed:

* ``settings``: every variable parses (a bad one is reported, then left out);
* ``database``, ``migrations``: reachable, every migration applied;
* ``web-role``, ``worker-role``, ``operator-role``: the role each process
  connects as (``RECEIPTS_WEB_DATABASE_URL``, ``RECEIPTS_WORKER_DATABASE_URL``,
  else ``DATABASE_URL``) may run every statement that process runs;
* ``listen``: a NOTIFY reaches the worker's LISTEN (a pooler in the way?);
* ``templates``: the templates compile and render a sample invoice;
* ``webhook-secret``: ``STRIPE_WEBHOOK_SECRET`` is set;
* ``provider``: which mail provider the settings choose, and its duplicate
  protection (``receipts.delivery.providers``);
* ``resend-key``, ``sending-domain``: Resend accepts ``RESEND_API_KEY`` and the
  domain of ``EMAIL_FROM`` is verified there; or ``postmark-token``,
  ``postmark-stream``: Postmark accepts ``POSTMARK_SERVER_TOKEN`` and
  ``POSTMARK_MESSAGE_STREAM`` is a transactional stream of its server; or
  ``smtp-login``: the server of ``SMTP_URL`` answers EHLO, STARTTLS and AUTH;
* ``stripe-key``, ``stripe-webhook``: with ``STRIPE_API_KEY``, Stripe accepts
  it and an enabled webhook endpoint is subscribed to ``invoice.paid``.

Run it where the processes run, with their environment (``heroku run
receipts doctor``), after a deploy or as a periodic check. Nothing is changed.
Beside a running ``receipts dev`` with DATABASE_URL unset it checks that dev
set-up: its database, and the sender, mail folder and secret dev chose.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping

from receipts.dev.state import with_dev_database
from receipts.operations.checks import (
    Check,
    database_checks,
    parse_settings,
    templates_check,
    webhook_secret_check,
)
from receipts.operations.provider_checks import cache_dir, mail_provider_checks, stripe_checks


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="ask Resend again even if its answer from the last hour is cached",
    )


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    checks = run_checks(with_dev_database(environ, dev_settings=True), use_cache=not args.no_cache)
    failed = [check for check in checks if not check.ok]
    if args.json:
        document = {
            "ok": not failed,
            "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in checks],
        }
        print(json.dumps(document, indent=2))
    else:
        for check in checks:
            print(check.line())
        print(f"{len(failed)} of {len(checks)} checks failed" if failed else "all checks passed")
    return 1 if failed else 0


def run_checks(environ: Mapping[str, str], *, use_cache: bool = True) -> list[Check]:
    settings, parsed = parse_settings(environ)
    return [
        parsed,
        *database_checks(settings),
        templates_check(settings),
        webhook_secret_check(settings, environ),
        *mail_provider_checks(settings, cache=cache_dir(environ), refresh=not use_cache),
        *stripe_checks(settings),
    ]
