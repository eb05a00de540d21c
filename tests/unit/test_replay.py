"""``receipts replay`` where no server or database is needed: signing, settings
and the command line. Replays against the real app are in tests/db/test_replay.py."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest

from receipts.cli import main
from receipts.commands.replay import stripe_signature
from receipts.ingest.verification import verify_signature
from tests.stripe_events import TEST_SECRET, sign

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def replay(url: str, *args: str, secret: str = TEST_SECRET) -> int:
    return main(["replay", *args, "--url", url], environ={"STRIPE_WEBHOOK_SECRET": secret})


def test_signature_matches_stripe_signing() -> None:
    """The header equals the one the test suite's Stripe signer makes, and verifies."""
    body = (EXAMPLES / "invoice_paid.json").read_bytes()
    header = stripe_signature(body, [TEST_SECRET, "whsec_other"], 1764460801)
    assert header == sign(body, [TEST_SECRET, "whsec_other"], timestamp=1764460801)
    fresh = stripe_signature(body, [TEST_SECRET], int(time.time()))
    assert verify_signature(body, fresh, (TEST_SECRET,))


def test_no_secret_anywhere_is_a_configuration_error(tmp_path: Path, capsys: Any) -> None:
    """Without STRIPE_WEBHOOK_SECRET or a dev secret, replay names the missing setting."""
    code = main(
        ["replay", str(EXAMPLES / "invoice_paid.json")],
        environ={"RECEIPTS_DEV_DIR": str(tmp_path / "never-ran")},
    )
    assert code == 2
    assert "STRIPE_WEBHOOK_SECRET" in capsys.readouterr().err


def test_unreachable_server_exits_non_zero(capsys: Any) -> None:
    """Nothing listening: each delivery reports no answer and the exit code is 1."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/webhooks/stripe"
    assert replay(url, str(EXAMPLES / "invoice_paid.json")) == 1
    out = capsys.readouterr().out
    assert "no answer" in out and "is `receipts dev` running?" in out


@pytest.mark.parametrize(
    "option", [["--times", "0"], ["--concurrent", "many"], ["--url", "localhost:8000/webhooks"]]
)
def test_bad_options_are_refused(option: list[str], capsys: Any) -> None:
    """--times and --concurrent take positive whole numbers, --url an http(s) URL; exit 2."""
    with pytest.raises(SystemExit) as exited:
        main(["replay", str(EXAMPLES / "invoice_paid.json"), *option])
    assert exited.value.code == 2
    assert option[0] in capsys.readouterr().err
