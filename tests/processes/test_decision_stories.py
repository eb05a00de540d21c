"""The two stories of operators causing a second receipt, replayed with real processes.

Each ``receipts review``, ``receipts status`` and ``receipts worker`` here is a
process of its own, as two people and a deployment would run them; the fake
Resend API runs as a process too, and Stripe's webhooks go through the real
app. Both stories must end with at most one email per invoice.

1. A receipt in review after a 422: alice resends it, the resend is sent,
   ``receipts status`` no longer counts it, and bob's ``review retry`` is
   refused, naming the resend.
2. Four decisions (retry, resend, dismiss, resolve) start at the same moment on
   each of 8 receipts in review while two ``receipts worker --loop`` run: on
   each receipt exactly one wins, every other exits 1 saying what changed, and
   no invoice gets two emails. The decisions are started while the test holds
   the 8 rows locked and let go together once all 32 wait, so every round is a
   real race whatever the machine's speed. ``RECEIPTS_RACE_ROUNDS`` (default 1)
   runs more rounds; each prints its figures with ``-s``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from tests import stripe_events
from tests.fake_provider import FakeProviderClient
from tests.helpers import wait_for
from tests.real_processes import finish, start_worker, worker_environ
from tests.stripe_events import TEST_SECRET, encode, sign

Db = psycopg.Connection[dict[str, Any]]
ROOT = Path(__file__).resolve().parents[2]
RECEIPTS = [sys.executable, "-m", "receipts.cli"]
ROUNDS = int(os.environ.get("RECEIPTS_RACE_ROUNDS", "1"))
ROWS = 8


@pytest.fixture
def fake() -> Iterator[FakeProviderClient]:
    """The fake Resend API in a process of its own, as a fleet of workers would reach it."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_provider", "--port", "0", "--api-key", "re_fault_lab"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("listening on "), line
    try:
        yield FakeProviderClient(line.split()[-1])
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def env(database_url: str, fake: FakeProviderClient) -> dict[str, str]:
    return worker_environ(
        database_url, fake, EMAIL_FROM="Billing <billing@example.com>", LOG_FORMAT="text"
    )


def receipts(env: dict[str, str], *args: str, by: str | None = None) -> subprocess.Popen[str]:
    """``receipts ARGS`` started as a process (``--by`` appended for a decision)."""
    who = ["--by", by] if by else []
    return subprocess.Popen(
        [*RECEIPTS, *args, *who], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def run(env: dict[str, str], *args: str, by: str | None = None) -> tuple[int, str, str]:
    return finish(receipts(env, *args, by=by))


def pay(client: FlaskClient, invoice_id: str) -> str:
    body = encode(stripe_events.event(stripe_events.invoice(id=invoice_id)))
    answer = client.post(
        "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
    )
    assert answer.status_code == 200 and answer.json is not None
    key: str = answer.json["message_key"]
    return key


def emails_by_invoice(fake: FakeProviderClient) -> Counter[str]:
    """How many emails the provider accepted per invoice (any key: receipt or resend)."""
    return Counter(delivery["key"].split("/")[2] for delivery in fake.deliveries())


# In-process, the default run proves the same refusal
# (tests/db/test_decision_guards.py: a retry after a resend is refused naming it).
@pytest.mark.slow
def test_a_retry_after_a_resend_is_refused_and_the_customer_gets_one_email(
    client: FlaskClient, db: Db, env: dict[str, str], fake: FakeProviderClient
) -> None:
    key = pay(client, "in_1StoryOne")
    fake.script({"status": 422, "name": "validation_error"})
    assert finish(start_worker(env))[0] == 0
    code, out, _ = run(env, "status")
    assert code == 1 and "NEEDS A PERSON: 1 receipt(s) in review" in out

    code, out, err = run(env, "review", "resend", key, "--reason", "customer asked", by="alice")
    assert code == 0, err
    assert f"resend queued as {key}/resend-1" in out
    assert finish(start_worker(env))[0] == 0
    code, out, _ = run(env, "status")
    assert code == 0 and "review          0 open (0 dismissed, 1 resent)" in out
    code, out, _ = run(env, "review", "list")
    assert "no receipts in review" in out and "1 resent" in out

    code, out, err = run(env, "review", "retry", key, "--reason", "still in review?", by="bob")
    assert code == 1 and out == ""
    assert f"refused: {key} was resent as {key}/resend-1 at " in err
    assert "by alice (sent " in err and "retrying would send a second email" in err
    assert "nothing was changed" in err
    assert finish(start_worker(env))[0] == 0
    assert emails_by_invoice(fake) == {"in_1StoryOne": 1}
    assert [d["key"] for d in fake.deliveries()] == [key + "/resend-1"]

    code, out, _ = run(env, "show", key)
    assert code == 0 and f"resent as     {key}/resend-1 (sent " in out
    assert "resend by alice: customer asked" in out


def waiting_sessions(db: Db) -> int:
    """Sessions of this database waiting for a lock."""
    found = db.execute(
        "SELECT count(DISTINCT l.pid) AS n FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
        "WHERE NOT l.granted AND a.datname = current_database()"
    ).fetchone()
    assert found is not None
    return int(found["n"])


def in_review(db: Db, keys: list[str]) -> int:
    found = db.execute(
        "SELECT count(*) AS n FROM email_outbox WHERE status = 'review' AND message_key = ANY(%s)",
        (keys,),
    ).fetchone()
    assert found is not None
    return int(found["n"])


def unsettled(db: Db) -> int:
    found = db.execute(
        "SELECT count(*) AS n FROM email_outbox WHERE status IN ('pending', 'processing')"
    ).fetchone()
    assert found is not None
    return int(found["n"])


def race_round(
    client: FlaskClient, db: Db, env: dict[str, str], fake: FakeProviderClient, n: int
) -> dict[str, Any]:
    """One round of the second story on 8 new invoices; its figures."""
    keys = [f"platform/test/in_1Race{n:03d}x{row}/invoice-paid" for row in range(ROWS)]
    fake.script(*({"status": 422, "name": "validation_error", "key": key} for key in keys))
    for key in keys:
        pay(client, key.split("/")[2])
    wait_for(lambda: in_review(db, keys) == ROWS, 30, "the 8 receipts to reach review")
    started: list[tuple[str, str, subprocess.Popen[str]]] = []
    with psycopg.connect(env["DATABASE_URL"]) as gate, gate.transaction():
        gate.execute("SELECT 1 FROM email_outbox WHERE message_key = ANY(%s) FOR UPDATE", (keys,))
        for row, key in enumerate(keys):
            decisions = {
                "retry": [key],
                "resend": [key],
                "dismiss": [key],
                "resolve": [key, "--provider-id", f"re_found_in_logs_{n}_{row}"],
            }
            for person, (kind, argv) in zip("abcd", decisions.items(), strict=True):
                process = receipts(env, "review", kind, *argv, "--reason", f"{kind} by {person}",
                                   by=person)  # fmt: skip
                started.append((key, kind, process))
        wait_for(lambda: waiting_sessions(db) >= len(started), 120, "every decision to wait")
    results = [(key, kind, *finish(process)) for key, kind, process in started]
    wait_for(lambda: unsettled(db) == 0, 60, "the loop workers to send what was decided")
    winners: dict[str, list[str]] = {key: [] for key in keys}
    for key, kind, code, _, err in results:
        assert code in (0, 1), err
        if code == 0:
            winners[key].append(kind)
        else:
            assert "refused: " in err and "nothing was changed" in err, err
    emails = emails_by_invoice(fake)
    invoices = {key: key.split("/")[2] for key in keys}
    return {
        "winners": Counter(kind for won in winners.values() for kind in won),
        "rows_with_one_winner": sum(1 for won in winners.values() if len(won) == 1),
        "emails": {key: emails[invoices[key]] for key in keys},
        "doubles": sum(1 for key in keys if emails[invoices[key]] > 1),
        "by_row": winners,
    }


@pytest.mark.slow
def test_racing_decisions_on_8_receipts_with_two_loop_workers_send_no_second_email(
    client: FlaskClient, db: Db, env: dict[str, str], fake: FakeProviderClient
) -> None:
    workers = [start_worker(env, "--loop", "--poll-seconds", "0.5") for _ in range(2)]
    totals: Counter[str] = Counter()
    doubles = 0
    try:
        for n in range(ROUNDS):
            figures = race_round(client, db, env, fake, n)
            shown = {k: figures[k] for k in ("winners", "rows_with_one_winner", "doubles")}
            print(f"race round {n + 1}/{ROUNDS}: {json.dumps(shown)}")
            assert figures["rows_with_one_winner"] == ROWS, figures["by_row"]
            for key, won in figures["by_row"].items():
                sent = figures["emails"][key]
                assert sent == (1 if won[0] in ("retry", "resend") else 0), (key, won, sent)
            totals.update(figures["winners"])
            doubles += figures["doubles"]
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
    assert [finish(worker, timeout=30)[0] for worker in workers] == [0, 0]
    print(f"race: {ROUNDS} round(s), {ROUNDS * ROWS} receipts, winners {dict(totals)}, "
          f"doubles {doubles}")  # fmt: skip
    assert doubles == 0
