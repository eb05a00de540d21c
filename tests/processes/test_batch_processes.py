"""Batches with real processes: ``receipts worker`` killed after Resend accepted a batch.

The fake provider runs as a process of its own; the workers are ``receipts
worker`` processes with ``RECEIPTS_BATCH_SIZE``. The provider delivers the
batch and holds its answer; the worker is killed (SIGKILL) while it waits;
a new worker sends the same batch under the same key and the provider
replays its first answer: every receipt delivered once. The permissive
refusal and the PDF row, which need no process of their own, are proven
in-process by tests/db/test_batches.py.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.fake_provider import FakeProviderClient
from tests.helpers import wait_for
from tests.outbox_states import insert_pending
from tests.outbox_states import row as outbox_row
from tests.real_processes import PROVIDER_KEY, finish, start_worker, worker_environ

Row = dict[str, Any]
DB = psycopg.Connection[Row]


@pytest.fixture
def fake() -> Iterator[FakeProviderClient]:
    """The fake provider in its own process, on a free port."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_provider", "--port", "0", "--api-key", PROVIDER_KEY],
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


@pytest.mark.slow
def test_a_worker_killed_after_the_provider_accepted_a_batch_is_replayed_not_resent(
    db: DB, database_url: str, fake: FakeProviderClient
) -> None:
    """SIGKILL between the provider's acceptance of a batch and its record: the rows
    stay in their live batch; the next worker sends the same members, in the same
    order, with the same body and key, and records the replayed ids."""
    keys = insert_pending(db, 12)
    fake.script({"hold_answer": "answer"})  # delivered at once; answered after the kill
    env = worker_environ(
        database_url, fake, RECEIPTS_PROVIDER_TIMEOUT="10", RECEIPTS_BATCH_SIZE="12"
    )
    worker = start_worker(env)
    wait_for(lambda: fake.held("answer") == 1, what="the batch delivered, its answer held")
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    fake.release("answer")
    wait_for(lambda: fake.stats()["in_flight"] == 0, what="the held answer to end")
    [batch] = db.execute("SELECT * FROM email_batches").fetchall()
    assert batch["finished_at"] is None and batch["size"] == 12
    first = fake.deliveries()
    assert len(first) == 12 and {d["key"] for d in first} == {batch["batch_key"]}

    db.execute("UPDATE email_outbox SET locked_until = now() - interval '1 second'")
    code, out, err = finish(start_worker(env))
    assert code == 0, err
    assert "sent=12 " in out
    stats = fake.stats()
    assert stats["requests_by_key"] == {batch["batch_key"]: 2} and stats["replays"] == 1
    assert fake.deliveries() == first  # nothing delivered twice
    # Each row's place in its batch is its email's index in the body the provider
    # accepted (rows ready at the same moment are claimed in no set order).
    ids = {d["message_key"]: d["id"] for d in first}
    indexes = {d["message_key"]: int(d["index"]) for d in first}
    assert sorted(indexes.values()) == list(range(12))
    for key in keys:
        row = outbox_row(db, key)
        tag = key.replace("/", "_")
        assert (row["status"], row["attempts"]) == ("sent", 2)
        assert row["provider_id"] == ids[tag]
        assert (row["batch_key"], row["batch_position"]) == (batch["batch_key"], indexes[tag])
    outcomes = db.execute(
        "SELECT outcome, count(*) AS n FROM email_attempts GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert outcomes == [{"outcome": "sent", "n": 12}, {"outcome": None, "n": 12}]
