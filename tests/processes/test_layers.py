"""Layering: the delivery side of the product does not depend on the web framework.

A cron job running ``receipts worker`` should not load a web stack, nor the
Stripe and Svix libraries (signature checks and Stripe's API are the web's):
each costs the worker's memory and start-up time. The test
runs the real command in a process of its own, against a real migrated
database with a pending row and the ``.eml`` file sink, so the whole send path
(claim, render, deliver, record) runs; an exit hook in that process then writes
down every module that was ever imported.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.outbox_states import Db, insert_pending
from tests.outbox_states import row as outbox_row
from tests.real_processes import run_receipts_recording_modules

WEB_ONLY = ("flask", "werkzeug", "stripe", "svix")


def test_receipts_worker_sends_without_ever_importing_the_web_libraries(
    db: Db, database_url: str, tmp_path: Path
) -> None:
    """`receipts worker` claims and sends a pending receipt (to the .eml sink)
    and exits 0, and neither Flask, werkzeug, stripe nor svix was imported in
    that process."""
    [key] = insert_pending(db, 1)
    mail_dir = tmp_path / "mail"
    result, modules = run_receipts_recording_modules(
        ["worker"],
        {"DATABASE_URL": database_url, "RECEIPTS_MAIL_DIR": str(mail_dir)},
        tmp_path / "modules.json",
    )
    assert result.returncode == 0, result.stderr
    assert outbox_row(db, key)["status"] == "sent"
    assert len(list(mail_dir.glob("*.eml"))) == 1
    # The record is of this very run: the worker's own modules are in it.
    assert {"receipts.commands.worker", "receipts.delivery.worker"} <= set(modules)
    assert [m for m in modules if m.split(".")[0] in WEB_ONLY] == []


def test_the_web_app_does_not_import_svix_api_client() -> None:
    """The web process verifies Resend's signatures with ``standardwebhooks``; the
    ``svix`` package would also load Svix's API client (httpx, pydantic), which
    nothing calls, into every web worker."""
    result = subprocess.run(
        [sys.executable, "-c", "import sys, receipts.web; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    modules = result.stdout.split()
    assert "receipts.ingest.delivery_events" in modules
    assert [m for m in modules if m.split(".")[0] in ("svix", "pydantic")] == []
