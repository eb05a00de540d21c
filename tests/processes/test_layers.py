"""Layering: the delivery side of the product does not depend on the web framework."""

from __future__ import annotations

import subprocess
import sys


def test_worker_outbox_and_providers_do_not_import_flask() -> None:
    """`receipts worker` runs without Flask: a cron job should not load a web stack."""
    probe = (
        "import sys, receipts.delivery.worker, receipts.delivery.claims, "
        "receipts.delivery.providers, receipts.ingest.receipt; "
        "print(sorted(m for m in sys.modules if m == 'flask' or m.startswith('flask.')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"
