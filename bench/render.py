"""Rendering cost: microseconds to turn one event into its frozen receipt, no database.

Run by hand (not part of the tests)::

    .venv/bin/python -m bench.render [--event FILE] [--locale de_DE] [--rounds 7] [--number 500]

It times ``derive_receipt`` (read the invoice, fingerprint) followed by
``render_payload`` (render subject, text and HTML), as a receipt costs between
the webhook and its first claim, on the largest event in ``examples/`` unless
``--event`` names another, and prints the best and median of several rounds,
and the time to build the renderer (done once per worker process, at
start-up). Times are the process's CPU time, which other load on a shared
machine disturbs far less than wall-clock time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--event", type=Path, help="an event file (default: the largest example)")
    parser.add_argument("--locale", default="en_US")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--number", type=int, default=500, help="receipts per round")
    args = parser.parse_args()

    from receipts.receipt.derivation import ReceiptJob, derive_receipt
    from receipts.receipt.event import parse_event
    from receipts.receipt.payload import render_payload
    from receipts.receipt.rendering import Renderer

    path = args.event or max(EXAMPLES.glob("*.json"), key=lambda p: p.stat().st_size)
    event: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    started = time.process_time()
    renderer = Renderer(locale=args.locale)
    built = time.process_time() - started
    header = parse_event(event)

    def one() -> object:
        job = derive_receipt(header, email_from="billing@example.com")
        assert isinstance(job, ReceiptJob)
        return render_payload(job.message_key, job.render_input, renderer)

    one()  # warm caches, as a running web process has them
    per_receipt = []
    for _ in range(args.rounds):
        started = time.process_time()
        for _ in range(args.number):
            one()
        per_receipt.append((time.process_time() - started) / args.number * 1e6)
    print(f"event: {path.name} ({path.stat().st_size} bytes), locale {args.locale}")
    print(f"renderer built in {built * 1000:.1f} ms")
    print(
        f"derive_receipt: best {min(per_receipt):.0f} µs, "
        f"median {statistics.median(per_receipt):.0f} µs of CPU per receipt "
        f"({args.rounds} rounds of {args.number})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
