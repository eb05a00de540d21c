"""The drain baseline: the worker loop of the source articles, one row per transaction.

``python -m bench.article_worker DATABASE_URL PROVIDER_URL API_KEY MAX_SECONDS``

In one transaction: claim one pending row (``FOR UPDATE SKIP LOCKED LIMIT 1``),
send it with its key as Idempotency-Key while the transaction stays open, mark
it sent, commit. Repeats until nothing is pending or MAX_SECONDS have passed;
prints ``sent=N seconds=S``. Not part of the package.
"""

from __future__ import annotations

import sys
import time

import psycopg
import requests


def main(argv: list[str]) -> int:
    url, provider_url, api_key, max_seconds = argv[0], argv[1], argv[2], float(argv[3])
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {api_key}"
    sent = 0
    started = time.monotonic()
    with psycopg.connect(url) as conn:
        while time.monotonic() - started < max_seconds:
            with conn.transaction():
                row = conn.execute(
                    """SELECT message_key, payload::text FROM email_outbox
                        WHERE status = 'pending' AND available_at <= now()
                        ORDER BY available_at LIMIT 1 FOR UPDATE SKIP LOCKED"""
                ).fetchone()
                if row is None:
                    break
                key, payload = row
                answer = session.post(
                    provider_url + "/emails",
                    data=payload.encode(),
                    headers={"Idempotency-Key": key, "Content-Type": "application/json"},
                    timeout=10,
                )
                answer.raise_for_status()
                conn.execute(
                    """UPDATE email_outbox SET status = 'sent', provider_id = %s, sent_at = now(),
                              attempts = attempts + 1, updated_at = now()
                        WHERE message_key = %s""",
                    (answer.json()["id"], key),
                )
            sent += 1
    print(f"sent={sent} seconds={time.monotonic() - started:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
