"""Operator decisions are guarded transitions: no decision causes a second receipt unasked.

Real parts throughout: the Stripe webhook through the Flask app, the worker
(``run_worker``) against the fake Resend API, and ``receipts review``,
``receipts status`` and ``receipts show`` through the CLI.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient
from psycopg.rows import dict_row

from receipts.cli import main
from receipts.config import load_settings
from receipts.delivery.claims import claim_ready
from receipts.delivery.configured import provider_from_settings
from receipts.delivery.worker import run_worker
from receipts.operations.review import Decider, Refused
from receipts.operations.review_decisions import retry
from tests import stripe_events
from tests.fake_provider import FakeProviderClient, running_fake_provider
from tests.helpers import wait_for
from tests.outbox_states import Db, actions, insert_attempt, insert_row, row
from tests.stripe_events import TEST_SECRET, encode, sign


@pytest.fixture
def env(environ: dict[str, str]) -> dict[str, str]:
    return {**environ, "USER": "alice"}


@pytest.fixture
def fake() -> Iterator[FakeProviderClient]:
    with running_fake_provider() as provider:
        yield provider


def review(env: dict[str, str], *argv: str, by: str = "alice") -> int:
    who = [] if argv[0] == "list" else ["--by", by]
    return main(["review", *argv, *who], env)


def deliver(client: FlaskClient, invoice: dict[str, Any]) -> str:
    body = encode(stripe_events.event(invoice))
    answer = client.post(
        "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
    )
    assert answer.status_code == 200 and answer.json is not None
    key: str = answer.json["message_key"]
    return key


def drain(env: dict[str, str], fake: FakeProviderClient) -> None:
    settings = load_settings({**env, "RESEND_API_KEY": "re_guard", "RESEND_API_URL": fake.url})
    provider = provider_from_settings(settings, concurrency=1)
    try:
        assert run_worker(settings, provider, concurrency=1).error is None
    finally:
        provider.close()


def delivered_to(fake: FakeProviderClient) -> dict[str, list[str]]:
    """Each key the provider accepted, with the recipients of its email."""
    return {d["key"]: json.loads(d["body"])["to"] for d in fake.deliveries()}


def unchanged(db: Db, before: list[dict[str, Any]]) -> bool:
    rows = db.execute("SELECT * FROM email_outbox ORDER BY message_key").fetchall()
    return rows == before


def everything(db: Db) -> list[dict[str, Any]]:
    return db.execute("SELECT * FROM email_outbox ORDER BY message_key").fetchall()


def test_a_retry_after_a_resend_is_refused_naming_the_resend(
    client: FlaskClient, env: dict[str, str], db: Db, fake: FakeProviderClient, capsys: Any
) -> None:
    """The first story: a 422 puts the receipt in review; alice resends it and the resend is
    sent; status no longer counts the original; bob's retry is refused, saying what was
    sent, when and by whom, and nothing changes; the provider accepted one email."""
    key = deliver(client, stripe_events.invoice(id="in_1Story1"))
    fake.script({"status": 422, "name": "validation_error"})
    drain(env, fake)
    assert main(["status"], env) == 1
    assert "NEEDS A PERSON: 1 receipt(s) in review" in capsys.readouterr().out

    assert review(env, "resend", key, "--reason", "the customer asked") == 0
    assert f"resend queued as {key}/resend-1" in capsys.readouterr().out
    drain(env, fake)
    assert main(["status"], env) == 0
    out = capsys.readouterr().out
    assert "review          0 open (0 dismissed, 1 resent)" in out

    before = everything(db)
    assert review(env, "retry", key, "--reason", "still in review?", by="bob") == 1
    err = capsys.readouterr().err
    resend = row(db, key + "/resend-1")
    sent = resend["sent_at"].strftime("%H:%M")
    decided = actions(db, key)[0]["performed_at"].strftime("%Y-%m-%d %H:%M UTC")
    assert (
        f"refused: {key} was resent as {key}/resend-1 at {decided} by alice (sent {sent}, "
        f"provider id {resend['provider_id']}); retrying would send a second email. Rerun with "
        "--accept-duplicate-risk if the customer should get both." in err
    )
    assert "nothing was changed" in err
    assert unchanged(db, before) and [a["action"] for a in actions(db, key)] == ["resend"]
    drain(env, fake)
    assert list(delivered_to(fake)) == [key + "/resend-1"]

    assert review(env, "list") == 0
    out = capsys.readouterr().out
    assert "no receipts in review" in out and "not listed, needing no decision: 1 resent" in out
    assert review(env, "list", "--all") == 0
    assert f"resent as {key}/resend-1 (sent " in capsys.readouterr().out


def test_a_retry_after_a_failed_resend_leaves_nothing_open_once_the_receipt_is_sent(
    client: FlaskClient, env: dict[str, str], db: Db, fake: FakeProviderClient, capsys: Any
) -> None:
    """The first story the other way round: the resend fails too, so the receipt itself is
    retried and sent. The failed resend then needs nobody: it is dismissed in the same
    decision, logged as superseded, and status says nothing needs a person."""
    key = deliver(client, stripe_events.invoice(id="in_1Story1Back"))
    fake.script({"status": 422, "name": "validation_error"})
    drain(env, fake)
    assert review(env, "resend", key, "--reason", "try once more") == 0
    fake.script({"status": 422, "name": "validation_error"})
    drain(env, fake)
    assert row(db, key + "/resend-1")["status"] == "review"

    assert review(env, "retry", key, "--reason", "the address is fixed in Stripe", by="bob") == 0
    assert row(db, key + "/resend-1")["review_reason"] == "dismissed"
    [superseded] = actions(db, key + "/resend-1")[-1:]
    assert superseded["action"] == "dismiss" and superseded["performed_by"] == "bob"
    assert superseded["details"]["superseded_by"] == f"retry of {key}"
    drain(env, fake)
    assert list(delivered_to(fake)) == [key]
    capsys.readouterr()
    assert main(["status"], env) == 0
    assert "review          0 open (1 dismissed, 0 resent)" in capsys.readouterr().out


def test_accepting_the_duplicate_risk_is_explicit_and_recorded(
    env: dict[str, str], db: Db, capsys: Any
) -> None:
    """With --accept-duplicate-risk the retry goes ahead; the action says which risk."""
    key = insert_row(db, "in_1Accept", status="review", review_reason="validation_error")
    copy = insert_row(
        db, "in_1Accept", key=key + "/resend-1", status="sent", provider_id="re_copy",
        sent_ago=timedelta(minutes=5),
    )  # fmt: skip
    db.execute("UPDATE email_outbox SET resent_as = %s WHERE message_key = %s", (copy, key))
    assert review(env, "retry", key, "--accept-duplicate-risk", "--reason", "asked for both") == 0
    after = row(db, key)
    assert (after["status"], after["resent_as"]) == ("pending", None)
    [action] = actions(db, key)
    assert action["details"]["accepted_duplicate_risk"] is True
    assert action["details"]["was_resent_as"] == copy
    assert "was resent as" in action["details"]["accepted_risks"][0]


def test_a_dismissal_is_final_unless_undone(env: dict[str, str], db: Db, capsys: Any) -> None:
    """retry, resend and resolve of a dismissed receipt are refused naming who dismissed it;
    with --undo-dismiss they apply, and the action says the dismissal was undone. A second
    dismiss is refused too."""
    keys = [
        insert_row(db, f"in_1Dis{n}", status="review", review_reason="validation_error")
        for n in range(3)
    ]
    for key in keys:
        assert review(env, "dismiss", key, "--reason", "Stripe sent its own") == 0
    capsys.readouterr()
    before = everything(db)
    decisions = [["retry"], ["resend"], ["resolve", "--provider-id", "re_found"]]
    for key, decision in zip(keys, decisions, strict=True):
        assert review(env, decision[0], key, *decision[1:], "--reason", "x", by="bob") == 1
        err = capsys.readouterr().err
        assert (
            f"refused: {key} was dismissed at " in err and "by alice ('Stripe sent its own')" in err
        )
        assert "a dismissal is final. Rerun with --undo-dismiss" in err
    assert review(env, "dismiss", keys[0], "--reason", "again", by="bob") == 1
    assert "it is already dismissed" in capsys.readouterr().err
    assert unchanged(db, before)

    for key, decision in zip(keys, decisions, strict=True):
        code = review(env, decision[0], key, *decision[1:], "--undo-dismiss", "--reason", "y")
        assert code == 0, capsys.readouterr().err
        assert actions(db, key)[-1]["details"]["undid_dismiss"] is True
    assert row(db, keys[0])["status"] == "pending"
    assert row(db, keys[1])["resent_as"] == keys[1] + "/resend-1"
    assert row(db, keys[1])["review_reason"] == "validation_error"  # its reason, back
    assert row(db, keys[2])["status"] == "sent"


def test_resolve_is_refused_once_a_resend_was_sent_and_never_takes_its_id(
    env: dict[str, str], db: Db, capsys: Any
) -> None:
    """Recording the original as sent while its resend was sent says the customer got two:
    refused unless accepted; the resend's own id is refused whatever the flags."""
    key = insert_row(db, "in_1Resolve", status="review", review_reason="validation_error")
    copy = insert_row(
        db, "in_1Resolve", key=key + "/resend-1", status="sent", provider_id="re_copy",
        sent_ago=timedelta(minutes=5),
    )  # fmt: skip
    db.execute("UPDATE email_outbox SET resent_as = %s WHERE message_key = %s", (copy, key))
    before = everything(db)
    assert review(env, "resolve", key, "--provider-id", "re_found", "--reason", "x") == 1
    err = capsys.readouterr().err
    assert f"{key} was resent as {copy}" in err and "the customer got two emails" in err
    flags = ["--accept-duplicate-risk", "--undo-dismiss"]
    assert review(env, "resolve", key, "--provider-id", "re_copy", *flags, "--reason", "x") == 1
    assert f"re_copy is the provider id of {copy}" in capsys.readouterr().err
    assert unchanged(db, before)
    assert review(env, "resolve", key, "--provider-id", "re_found", flags[0], "--reason", "x") == 0
    assert row(db, key)["status"] == "sent"


def test_a_resend_of_a_bounced_receipt_says_the_customer_did_not_get_it(
    env: dict[str, str], db: Db, capsys: Any
) -> None:
    """Resend reported the sent receipt bounced: the refusal says so, so the person knows
    accepting the risk sends the customer their only copy."""
    key = insert_row(db, "in_1Bounced", status="sent", provider_id="re_b", sent_ago=timedelta(0))
    db.execute(
        "UPDATE email_outbox SET delivery_status = 'bounced', delivery_status_at = now() "
        "WHERE message_key = %s",
        (key,),
    )
    assert review(env, "resend", key, "--to", "other@example.com", "--reason", "bounced") == 1
    err = capsys.readouterr().err
    assert "but Resend reported it bounced: the customer did not get it" in err
    assert review(env, "resend", key, "--to", "other@example.com", "--accept-duplicate-risk",
                  "--reason", "bounced") == 0  # fmt: skip
    assert row(db, key + "/resend-1")["payload"]["to"] == ["other@example.com"]


def test_a_resend_after_an_attempt_that_may_have_been_accepted_needs_the_risk_accepted(
    env: dict[str, str], db: Db, capsys: Any
) -> None:
    """The worker died mid-send: the provider may have accepted the email, and a resend goes
    under a new key the provider cannot deduplicate. Refused naming the attempt."""
    key = insert_row(
        db, "in_1Ambiguous", status="review", review_reason="retry_window_elapsed", attempts=1
    )
    insert_attempt(db, key, started_ago=timedelta(hours=25), finished=False)
    assert review(env, "resend", key, "--reason", "x") == 1
    err = capsys.readouterr().err
    assert f"attempt #1 of {key} at " in err and "(its worker died mid-send)" in err
    assert review(env, "resend", key, "--accept-duplicate-risk", "--reason", "not in logs") == 0


@pytest.mark.parametrize(
    ("customer_email", "reason"),
    [(None, "missing_customer_email"), ("jenny@@example", "invalid_customer_email")],
)
def test_resend_to_fixes_a_receipt_whose_invoice_had_no_usable_address(
    client: FlaskClient,
    env: dict[str, str],
    db: Db,
    fake: FakeProviderClient,
    capsys: Any,
    customer_email: str | None,
    reason: str,
) -> None:
    """An invoice without (or with a malformed) customer email: review, never rendered. A
    retry is refused with the way out; a resend without --to asks for one; with --to the
    worker renders the receipt from the stored invoice and sends it once, to the new
    address only; the action names both addresses; status and show agree."""
    invoice = stripe_events.invoice(id=f"in_1Fix{reason[:7]}", number="ACME-0102")
    invoice["customer_email"] = customer_email
    key = deliver(client, invoice)
    assert (row(db, key)["status"], row(db, key)["review_reason"]) == ("review", reason)
    assert row(db, key)["payload"] is None and row(db, key)["render_input"] is not None
    assert main(["show", key], env) == 0
    assert f"receipts review resend {key} --to ADDRESS" in capsys.readouterr().out

    assert review(env, "retry", key, "--reason", "try") == 1
    err = capsys.readouterr().err
    assert f"cannot become an email as Stripe sent it ({reason})" in err
    assert f"receipts review resend {key} --to ADDRESS" in err
    assert review(env, "resend", key, "--reason", "try") == 1
    assert "give the right address with --to ADDRESS" in capsys.readouterr().err
    assert review(env, "resend", key, "--to", "jenny@example.com", "--reason", "she called") == 0
    out = capsys.readouterr().out
    assert f"resend queued as {key}/resend-1 to jenny@example.com" in out
    assert "made from the stored invoice when a worker first takes it" in out
    assert main(["status"], env) == 0
    capsys.readouterr()

    drain(env, fake)
    drain(env, fake)
    [delivery] = fake.deliveries()
    sent = json.loads(delivery["body"])
    assert delivery["key"] == key + "/resend-1" and sent["to"] == ["jenny@example.com"]
    assert "ACME-0102" in sent["subject"] and "$19.99" in sent["text"]
    assert sent["tags"] == [{"name": "message_key", "value": (key + "/resend-1").replace("/", "_")}]
    assert row(db, key + "/resend-1")["status"] == "sent"
    [action] = actions(db, key)
    assert (action["details"]["to"], action["details"]["previous_to"]) == (
        "jenny@example.com", customer_email
    )  # fmt: skip
    assert main(["show", key], env) == 0
    assert f"resent as     {key}/resend-1 (sent " in capsys.readouterr().out


def test_a_second_decision_waits_for_the_first_and_is_refused_naming_it(
    database_url: str, db: Db, env: dict[str, str]
) -> None:
    """alice's resend holds the family's lock; bob's retry waits, then sees the resend and
    is refused; nothing of his is stored."""
    key = insert_row(db, "in_1Wait", status="review", review_reason="validation_error")
    outcome: dict[str, str] = {}

    def bob() -> None:
        with psycopg.connect(database_url, row_factory=dict_row) as conn:
            try:
                retry(conn, key, Decider(performed_by="bob", reason="x"), retry_cutoff_hours=23)
                outcome["bob"] = "retried"
            except Refused as refused:
                outcome["bob"] = str(refused)

    from receipts.operations.resending import resend

    with psycopg.connect(database_url, row_factory=dict_row) as alice, alice.transaction():
        resend(alice, key, Decider(performed_by="alice", reason="asked"))
        thread = threading.Thread(target=bob)
        thread.start()
        thread.join(timeout=0.5)
        assert thread.is_alive(), "bob's decision must wait for alice's"
    thread.join(timeout=10)
    assert f"{key} was resent as {key}/resend-1" in outcome["bob"] and "by alice" in outcome["bob"]
    assert [a["performed_by"] for a in actions(db, key)] == ["alice"]


def test_decisions_on_a_receipt_and_its_resend_at_once_cannot_both_send(
    database_url: str, db: Db
) -> None:
    """The receipt and its resend both in review after a 422: a retry of each, let go at the
    same moment (both rows held until both decisions wait), must not both win, or the
    customer would get two emails. The family's lock makes the second wait for the first
    and see it."""
    key = insert_row(db, "in_1Both", status="review", review_reason="validation_error")
    copy = insert_row(
        db, "in_1Both", key=key + "/resend-1", status="review", review_reason="validation_error"
    )
    db.execute("UPDATE email_outbox SET resent_as = %s WHERE message_key = %s", (copy, key))
    outcomes: dict[str, str] = {}

    def person(target: str) -> None:
        with psycopg.connect(database_url, row_factory=dict_row) as conn:
            try:
                retry(conn, target, Decider(performed_by=target, reason="x"), retry_cutoff_hours=23)
                outcomes[target] = "retried"
            except Refused as refused:
                outcomes[target] = str(refused)

    def waiting() -> int:
        found = db.execute(
            "SELECT count(DISTINCT l.pid) AS n FROM pg_locks l JOIN pg_stat_activity a "
            "USING (pid) WHERE NOT l.granted AND a.datname = current_database()"
        ).fetchone()
        return int(found["n"]) if found else 0

    def at_least(sessions: int) -> bool:
        return waiting() >= sessions

    people = [threading.Thread(target=person, args=(target,)) for target in (key, copy)]
    with psycopg.connect(database_url) as gate, gate.transaction():
        gate.execute(
            "SELECT 1 FROM email_outbox WHERE message_key = ANY(%s) FOR UPDATE", ([key, copy],)
        )
        for n, thread in enumerate(people, start=1):
            thread.start()
            wait_for(functools.partial(at_least, n), 20, "the decision to wait")
    for thread in people:
        thread.join(timeout=20)
    assert sorted(outcome == "retried" for outcome in outcomes.values()) == [False, True]
    statuses = [row(db, target)["status"] for target in (key, copy)]
    assert sorted(statuses) == ["pending", "review"]


def test_a_worker_never_claims_a_row_a_decision_is_taking_out_of_review(
    database_url: str, db: Db
) -> None:
    """While a retry's transaction is open the row is still review for everyone else: a
    claim takes nothing. Once it commits, the next claim takes the row."""
    key = insert_row(db, "in_1Claim", status="review", review_reason="validation_error")

    def claim() -> list[str]:
        with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
            found = claim_ready(
                conn, limit=10, worker_id="w", lease_seconds=60, max_attempts=10,
                retry_cutoff_hours=23, render=lambda key, stored: stored,
            )  # fmt: skip
        return [claimed.message_key for claimed in found.rows]

    with psycopg.connect(database_url, row_factory=dict_row) as conn, conn.transaction():
        retry(conn, key, Decider(performed_by="alice", reason="x"), retry_cutoff_hours=23)
        assert claim() == []
    assert claim() == [key]
