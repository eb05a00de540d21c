"""``receipts review``: each decision applies only in the right state, and is recorded."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient
from psycopg.rows import dict_row

from receipts.cli import main
from receipts.config import load_settings
from receipts.delivery.configured import provider_from_settings
from receipts.delivery.worker import run_worker
from receipts.operations.review import Decider, Refused
from receipts.operations.review_decisions import dismiss, resolve
from receipts.web import create_app
from tests import stripe_events
from tests.fake_provider import MESSAGES, running_fake_provider
from tests.helpers import wait_for
from tests.outbox_states import Db, actions, insert_attempt, insert_row, row
from tests.resend_events import SECRET as RESEND_SECRET
from tests.resend_events import event as resend_event
from tests.resend_events import post as post_resend
from tests.sessions import waiting_on_a_lock
from tests.stripe_events import TEST_SECRET, encode, sign


@pytest.fixture
def operator_env(environ: dict[str, str]) -> dict[str, str]:
    return {**environ, "USER": "carol"}


def review(env: dict[str, str], *argv: str) -> int:
    return main(["review", *argv], env)


def unchanged(db: Db, key: str, before: dict[str, Any]) -> bool:
    return row(db, key) == before and actions(db, key) == []


# --- list ---------------------------------------------------------------------


def test_list_shows_open_review_rows(operator_env: dict[str, str], db: Db, capsys: Any) -> None:
    """Open review rows are listed with their reason; dismissed ones only with --all."""
    exhausted = insert_row(db, "in_1L1", status="review", review_reason="attempts_exhausted")
    insert_row(
        db, "in_1L2", status="review", review_reason="missing_customer_email", with_payload=False
    )
    closed = insert_row(db, "in_1L3", status="review", review_reason="dismissed")
    insert_row(db, "in_1L4", status="sent", provider_id="re_1")
    assert review(operator_env, "list") == 0
    out = capsys.readouterr().out
    assert exhausted in out and "missing_customer_email" in out and "no email could be made" in out
    assert closed not in out and "2 receipt(s)" in out
    assert review(operator_env, "list", "--reason", "attempts_exhausted", "--json") == 0
    assert [r["message_key"] for r in json.loads(capsys.readouterr().out)] == [exhausted]
    assert review(operator_env, "list", "--all") == 0
    assert closed in capsys.readouterr().out


def test_list_shows_what_support_needs_to_act_and_json_carries_the_same(
    client: FlaskClient, operator_env: dict[str, str], db: Db, capsys: Any
) -> None:
    """Per row: key, reason, age, customer address (a malformed one too), amount,
    invoice number and the provider's last error message; --json has each field."""
    bad = stripe_events.invoice(
        id="in_1BadTo", number="ACME-0102", customer_email="jenny@@example", amount_paid=4200
    )
    good = stripe_events.invoice(id="in_1Refused", number="ACME-0103", amount_paid=1999)
    for invoice in (bad, good):
        body = encode(stripe_events.event(invoice))
        client.post(
            "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
        )
    with running_fake_provider(api_key="re_list") as fake:
        fake.script({"status": 422, "name": "validation_error"})
        settings = load_settings(
            {**operator_env, "RESEND_API_KEY": "re_list", "RESEND_API_URL": fake.url}
        )
        provider = provider_from_settings(settings, concurrency=1)
        try:
            run_worker(settings, provider, concurrency=1)
        finally:
            provider.close()

    assert review(operator_env, "list") == 0
    out = capsys.readouterr().out
    assert "platform/test/in_1BadTo/invoice-paid  invalid_customer_email  age 0m 0" in out
    assert "invoice ACME-0102  $42.00  to jenny@@example" in out
    assert "platform/test/in_1Refused/invoice-paid  validation_error  age" in out
    assert "invoice ACME-0103  $19.99  to jenny.rosen@example.com" in out
    said = MESSAGES["validation_error"]
    assert f'provider said: HTTP 422 validation_error: "{said}"' in out

    assert review(operator_env, "list", "--json") == 0
    by_key = {entry["message_key"]: entry for entry in json.loads(capsys.readouterr().out)}
    refused = by_key["platform/test/in_1Refused/invoice-paid"]
    assert refused["review_reason"] == "validation_error"
    assert refused["invoice_number"] == "ACME-0103"
    assert refused["customer_email"] == "jenny.rosen@example.com"
    assert (refused["amount"], refused["currency"], refused["amount_display"]) == (
        1999, "usd", "$19.99"
    )  # fmt: skip
    assert refused["provider_http_status"] == 422
    assert refused["provider_error"] == "validation_error"
    assert refused["provider_message"] == MESSAGES["validation_error"]
    assert 0 <= refused["age_seconds"] < 60
    malformed = by_key["platform/test/in_1BadTo/invoice-paid"]
    assert malformed["customer_email"] == "jenny@@example" and not malformed["has_email"]
    assert malformed["provider_message"] is None


def test_list_flags_only_rows_whose_tag_the_provider_reported(
    operator_env: dict[str, str], db: Db, capsys: Any
) -> None:
    """A delivery event for an unrecorded email whose tag is a row's cleaned key
    (slashes become underscores) flags that row as probably sent, and no other."""
    reported = insert_row(db, "in_1Tag1", status="review", review_reason="attempts_exhausted")
    quiet = insert_row(db, "in_1Tag2", status="review", review_reason="attempts_exhausted")
    assert reported == "platform/test/in_1Tag1/invoice-paid"
    db.execute(
        """INSERT INTO resend_events (svix_id, event_type, email_id, message_tag, outcome)
           VALUES ('msg_tag', 'email.delivered', 're_tag',
                   'platform_test_in_1Tag1_invoice-paid', 'unknown_email')"""
    )
    assert review(operator_env, "list", "--json") == 0
    flags = {
        r["message_key"]: r["provider_reported_send"] for r in json.loads(capsys.readouterr().out)
    }
    assert flags == {reported: True, quiet: False}


def test_list_offers_the_evidence_of_an_unrecorded_send(
    operator_env: dict[str, str], db: Db, capsys: Any
) -> None:
    """An ambiguous review row with evidence (Resend's email.sent naming it by tag) is
    offered for resolution with that email's id and acceptance time; --json carries it."""
    key = insert_row(db, "in_1Offer", status="review", review_reason="attempts_exhausted")
    db.execute(
        """INSERT INTO resend_events (svix_id, event_type, email_id, message_key, message_tag,
                                      outcome, email_created_at)
           VALUES ('msg_offer', 'email.sent', 're_offered', %s, %s, 'evidence',
                   '2026-11-30T00:59:58Z')""",
        (key, key.replace("/", "_")),
    )
    assert review(operator_env, "list") == 0
    out = capsys.readouterr().out
    assert (
        "Resend accepted it at 2026-11-30T00:59:58+00:00 as email re_offered; "
        "resolve with this id?" in out
    )
    assert (
        f"receipts review resolve {key} --provider-id re_offered "
        "--sent-at 2026-11-30T00:59:58+00:00" in out
    )
    assert review(operator_env, "list", "--json") == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert listed["evidence"] == [
        {"email_id": "re_offered", "accepted_at": "2026-11-30 00:59:58+00:00"}
    ]


def test_list_when_nothing_waits(operator_env: dict[str, str], capsys: Any) -> None:
    assert review(operator_env, "list") == 0
    assert "no receipts in review" in capsys.readouterr().out


# --- resolve ------------------------------------------------------------------


def test_resolve_marks_sent_and_records_who_and_why(
    operator_env: dict[str, str], db: Db, capsys: Any
) -> None:
    """The provider's logs show it was sent: sent, provider id and time stored, action kept."""
    key = insert_row(db, "in_1Res", status="review", review_reason="retry_window_elapsed")
    code = review(
        operator_env, "resolve", key, "--provider-id", "re_found",
        "--sent-at", "2026-11-29T10:00:00Z", "--reason", "found in Resend logs",
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    after = row(db, key)
    assert (after["status"], after["provider_id"], after["review_reason"]) == (
        "sent",
        "re_found",
        None,
    )
    assert after["sent_at"] == datetime(2026, 11, 29, 10, tzinfo=UTC)
    [action] = actions(db, key)
    assert (action["action"], action["performed_by"], action["reason"]) == (
        "resolve",
        "carol",
        "found in Resend logs",
    )
    assert action["details"] == {
        "previous_reason": "retry_window_elapsed",
        "provider_id": "re_found",
    }


def test_resolve_refuses_a_row_not_in_review(
    operator_env: dict[str, str], db: Db, capsys: Any
) -> None:
    """A pending row is still the worker's: refused, exit 1, nothing changed."""
    key = insert_row(db, "in_1Pend")
    before = row(db, key)
    assert review(operator_env, "resolve", key, "--provider-id", "re_x", "--reason", "x") == 1
    err = capsys.readouterr().err
    assert f"refused: {key} is pending: it is on its way to the provider" in err
    assert "only a receipt in review can be resolved" in err and "nothing was changed" in err
    assert unchanged(db, key, before)


@pytest.mark.parametrize("state", ["pending", "processing", "sent"])
@pytest.mark.parametrize(
    "decision",
    [["resolve", "--provider-id", "re_x"], ["retry"], ["dismiss"]],
    ids=["resolve", "retry", "dismiss"],
)
def test_decisions_apply_only_to_review_rows(
    operator_env: dict[str, str], db: Db, capsys: Any, state: str, decision: list[str]
) -> None:
    """resolve, retry and dismiss on a pending, processing or sent row: refused, exit 1,
    the row and the action log unchanged."""
    key = insert_row(
        db, f"in_1State{state}", status=state, provider_id="re_1", sent_ago=timedelta(minutes=3)
    )
    before = row(db, key)
    assert review(operator_env, decision[0], key, *decision[1:], "--reason", "try") == 1
    err = capsys.readouterr().err
    said = {"sent": f"{key} was sent at", "pending": f"{key} is pending", "processing":
            f"{key} is processing: a worker is sending it right now"}[state]  # fmt: skip
    assert said in err and "only a receipt in review can be" in err
    assert unchanged(db, key, before)


def test_unknown_key_and_bad_arguments_are_refused(
    operator_env: dict[str, str], capsys: Any
) -> None:
    """Unknown key, an invoice id instead of a key, a blank reason: exit 1 with the reason."""
    assert (
        review(operator_env, "dismiss", "platform/test/in_1None/invoice-paid", "--reason", "x") == 1
    )
    assert "no receipt with message key" in capsys.readouterr().err
    assert review(operator_env, "dismiss", "in_1None", "--reason", "x") == 1
    assert "is not a message key" in capsys.readouterr().err
    assert (
        review(operator_env, "dismiss", "platform/test/in_1None/invoice-paid", "--reason", " ") == 1
    )
    assert "--reason must say why" in capsys.readouterr().err


def test_reason_is_required(operator_env: dict[str, str], capsys: Any) -> None:
    """Every decision needs --reason: a usage error (exit 2) without it."""
    with pytest.raises(SystemExit) as exit_info:
        review(operator_env, "dismiss", "platform/test/in_1X/invoice-paid")
    assert exit_info.value.code == 2
    assert "--reason" in capsys.readouterr().err


# --- retry --------------------------------------------------------------------


def test_retry_gives_a_fresh_window_when_no_attempt_reached_the_provider(
    operator_env: dict[str, str], db: Db
) -> None:
    """Only definite rejections so far: pending, attempts 0, no first attempt, ready now."""
    key = insert_row(
        db, "in_1Retry", status="review", review_reason="validation_error", attempts=1,
        first_attempt_ago=timedelta(hours=30),
    )  # fmt: skip
    insert_attempt(db, key, started_ago=timedelta(hours=30), http_status=422, outcome="review")
    assert review(operator_env, "retry", key, "--reason", "fixed the sender domain") == 0
    after = row(db, key)
    assert (after["status"], after["attempts"], after["first_attempt_at"]) == ("pending", 0, None)
    assert after["review_reason"] is None
    ready = db.execute("SELECT %s <= now() AS ready", (after["available_at"],)).fetchone()
    assert ready is not None and ready["ready"]
    [action] = actions(db, key)
    assert action["action"] == "retry" and action["details"]["previous_attempts"] == 1


def test_retry_refuses_when_an_old_attempt_may_have_been_accepted(
    operator_env: dict[str, str], db: Db, capsys: Any
) -> None:
    """A worker died mid-attempt 25 h ago: the provider may have sent it and has since
    forgotten the key. Refused unless the person accepts the duplicate risk."""
    key = insert_row(
        db, "in_1Ambig", status="review", review_reason="retry_window_elapsed", attempts=1,
        first_attempt_ago=timedelta(hours=25),
    )  # fmt: skip
    insert_attempt(db, key, started_ago=timedelta(hours=25), finished=False)
    before = row(db, key)
    assert review(operator_env, "retry", key, "--reason", "customer says none") == 1
    err = capsys.readouterr().err
    assert "may have reached the provider" in err and "--accept-duplicate-risk" in err
    assert unchanged(db, key, before)

    assert (
        review(
            operator_env, "retry", key, "--accept-duplicate-risk", "--reason", "not in Resend logs"
        )
        == 0
    )
    after = row(db, key)
    assert (after["status"], after["first_attempt_at"]) == ("pending", None)
    [action] = actions(db, key)
    assert action["details"]["accepted_duplicate_risk"] is True


def test_retry_after_a_recent_timeout_keeps_counting_from_it(
    operator_env: dict[str, str], db: Db, capsys: Any
) -> None:
    """A timeout 2 h ago may have been accepted; the provider still knows the key, so a
    retry is safe, but only until 23 h after that attempt: the window starts there."""
    key = insert_row(
        db, "in_1Recent", status="review", review_reason="attempts_exhausted", attempts=10,
        first_attempt_ago=timedelta(hours=3),
    )  # fmt: skip
    insert_attempt(
        db, key, attempt=1, started_ago=timedelta(hours=3), http_status=500, outcome="retry"
    )
    insert_attempt(
        db, key, attempt=2, started_ago=timedelta(hours=2), http_status=None, outcome="retry"
    )
    assert review(operator_env, "retry", key, "--reason", "provider outage over") == 0
    assert "retry window counts from the uncertain attempt" in capsys.readouterr().out
    after = row(db, key)
    attempts = db.execute(
        "SELECT min(started_at) AS first FROM email_attempts WHERE message_key = %s", (key,)
    ).fetchone()
    assert attempts is not None
    assert after["status"] == "pending" and after["first_attempt_at"] == attempts["first"]


def test_retry_refuses_when_the_cutoff_from_an_uncertain_attempt_has_passed(
    operator_env: dict[str, str], db: Db, capsys: Any
) -> None:
    """A timeout 23.5 h ago: the worker stops retrying 23 h after it and the provider
    forgets the key at 24 h, so no safe retry is left. Refused; accepting the risk
    gives a fresh window."""
    key = insert_row(
        db, "in_1Late", status="review", review_reason="retry_window_elapsed", attempts=4,
        first_attempt_ago=timedelta(hours=23, minutes=30),
    )  # fmt: skip
    insert_attempt(db, key, started_ago=timedelta(hours=23, minutes=30), http_status=None,
                   outcome="retry")  # fmt: skip
    before = row(db, key)
    assert review(operator_env, "retry", key, "--reason", "try again") == 1
    assert "the retry cutoff counted from it has passed" in capsys.readouterr().err
    assert unchanged(db, key, before)
    assert (
        review(
            operator_env, "retry", key, "--accept-duplicate-risk", "--reason", "not in Resend logs"
        )
        == 0
    )
    assert row(db, key)["first_attempt_at"] is None


def test_retry_refuses_a_receipt_without_an_email(
    operator_env: dict[str, str], db: Db, capsys: Any
) -> None:
    """A paid invoice with no customer email has nothing to send: refused."""
    key = insert_row(
        db,
        "in_1NoMail",
        status="review",
        review_reason="missing_customer_email",
        with_payload=False,
    )
    before = row(db, key)
    assert review(operator_env, "retry", key, "--reason", "try") == 1
    assert "has no email and nothing stored to make one from" in capsys.readouterr().err
    assert unchanged(db, key, before)


def test_retry_refuses_a_sent_receipt(operator_env: dict[str, str], db: Db, capsys: Any) -> None:
    key = insert_row(db, "in_1Sent", status="sent", provider_id="re_1", sent_ago=timedelta(0))
    before = row(db, key)
    assert review(operator_env, "retry", key, "--reason", "try") == 1
    assert f"{key} was sent at" in capsys.readouterr().err
    assert unchanged(db, key, before)


# --- resend -------------------------------------------------------------------


def test_resend_of_a_sent_receipt_needs_the_duplicate_risk_accepted(
    operator_env: dict[str, str], db: Db, capsys: Any
) -> None:
    """A sent receipt resent is a second email: refused, naming the send, unless the person
    accepts that. The copy is then pending with the same email (tag = its own key), the
    original keeps its email and records the resend; both rows carry the action."""
    key = insert_row(db, "in_1Again", status="sent", provider_id="re_1", sent_ago=timedelta(0))
    before = row(db, key)
    assert review(operator_env, "resend", key, "--reason", "customer deleted it") == 1
    err = capsys.readouterr().err
    assert f"refused: {key} was sent at " in err and "(provider id re_1)" in err
    assert "a resend would be another email to the customer" in err
    assert "Rerun with --accept-duplicate-risk if they should get another" in err
    assert unchanged(db, key, before)

    assert review(operator_env, "resend", key, "--accept-duplicate-risk",
                  "--reason", "customer deleted it") == 0  # fmt: skip
    copy_key = key + "/resend-1"
    copy = row(db, copy_key)
    assert copy["status"] == "pending" and copy["invoice_id"] == "in_1Again"
    expected = dict(before["payload"])
    expected["tags"] = [
        {"name": "message_key", "value": "platform_test_in_1Again_invoice-paid_resend-1"}
    ]
    assert copy["payload"] == expected and copy["customer_email"] == "jenny.rosen@example.com"
    after = row(db, key)
    assert after["resent_as"] == copy_key
    assert {**after, "resent_as": None, "updated_at": None} == {**before, "updated_at": None}
    [action] = actions(db, key)
    assert action["action"] == "resend"
    assert action["details"]["new_key"] == copy_key
    assert action["details"]["accepted_duplicate_risk"] is True
    assert action["details"]["recipient_changed"] is False
    assert [a["details"]["resend_of"] for a in actions(db, copy_key)] == [key]


def test_resend_to_a_new_recipient_records_both_addresses(
    operator_env: dict[str, str], db: Db
) -> None:
    """--to changes the copy's recipient only; the action names the old and the new address."""
    key = insert_row(db, "in_1NewTo", status="review", review_reason="validation_error")
    assert (
        review(operator_env, "resend", key, "--to", "ap@example.org", "--reason", "new address")
        == 0
    )
    copy = row(db, key + "/resend-1")
    assert (
        copy["payload"]["to"] == ["ap@example.org"] and copy["customer_email"] == "ap@example.org"
    )
    assert row(db, key)["payload"]["to"] == ["jenny.rosen@example.com"]
    [action] = actions(db, key)
    assert (action["details"]["to"], action["details"]["previous_to"]) == (
        "ap@example.org", "jenny.rosen@example.com"
    )  # fmt: skip


def test_resend_numbers_and_refusals(operator_env: dict[str, str], db: Db, capsys: Any) -> None:
    """A resend still pending blocks another, whatever the flags; once sent, the next is -2
    (even when asked on the -1 key, and only with the risk accepted); a bad --to and a
    receipt still being sent are refused."""
    key = insert_row(db, "in_1Nums", status="review", review_reason="validation_error")
    assert review(operator_env, "resend", key, "--reason", "one") == 0
    for flags in ([], ["--accept-duplicate-risk"]):
        assert review(operator_env, "resend", key, *flags, "--reason", "two") == 1
        err = capsys.readouterr().err
        assert f"{key} was resent as {key}/resend-1 at " in err and "by carol (pending" in err
        assert "Wait until it is sent or in review" in err
    db.execute(
        "UPDATE email_outbox SET status = 'sent', provider_id = 're_2', sent_at = now() "
        "WHERE message_key = %s",
        (key + "/resend-1",),
    )
    assert review(operator_env, "resend", key + "/resend-1", "--reason", "two") == 1
    assert f"{key}/resend-1 was sent at" in capsys.readouterr().err
    assert review(operator_env, "resend", key + "/resend-1", "--accept-duplicate-risk",
                  "--reason", "two") == 0  # fmt: skip
    assert row(db, key + "/resend-2")["status"] == "pending"
    assert row(db, key)["resent_as"] == key + "/resend-2"
    assert review(operator_env, "resend", key, "--to", "not-an-address", "--reason", "x") == 1
    assert "is not an email address" in capsys.readouterr().err
    no_email = insert_row(
        db, "in_1NoEmail", status="review", review_reason="invalid_customer_email",
        with_payload=False,
    )  # fmt: skip
    assert review(operator_env, "resend", no_email, "--reason", "x") == 1
    assert "nothing to resend" in capsys.readouterr().err
    pending = insert_row(db, "in_1StillGoing")
    assert review(operator_env, "resend", pending, "--reason", "x") == 1
    assert "a resend now would be a second email" in capsys.readouterr().err
    count = db.execute("SELECT count(*) AS n FROM email_outbox").fetchone()
    assert count is not None and count["n"] == 5


# --- dismiss ------------------------------------------------------------------


def test_dismiss_closes_a_review_row(operator_env: dict[str, str], db: Db, capsys: Any) -> None:
    """Dismissed: stays review with reason 'dismissed', stops failing the health check,
    and cannot be dismissed twice."""
    key = insert_row(db, "in_1Dis", status="review", review_reason="invalid_customer_email")
    assert main(["status"], operator_env) == 1
    assert (
        review(operator_env, "dismiss", key, "--reason", "Stripe sent its own", "--by", "dan") == 0
    )
    after = row(db, key)
    assert (after["status"], after["review_reason"]) == ("review", "dismissed")
    [action] = actions(db, key)
    assert action["performed_by"] == "dan"
    assert action["details"] == {"previous_reason": "invalid_customer_email"}
    assert main(["status"], operator_env) == 0
    capsys.readouterr()
    assert review(operator_env, "dismiss", key, "--reason", "again") == 1
    assert "already dismissed" in capsys.readouterr().err


def test_two_people_deciding_at_once_one_wins(database_url: str, db: Db) -> None:
    """The family is locked by the first decision: the second waits, then sees 'sent'
    and is refused. The row never ends up both resolved and dismissed."""
    key = insert_row(db, "in_1Race", status="review", review_reason="attempts_exhausted")
    first = psycopg.connect(database_url, row_factory=dict_row)
    outcome: dict[str, str] = {}

    def second_person() -> None:
        with psycopg.connect(database_url, row_factory=dict_row) as conn:
            try:
                dismiss(conn, key, Decider(performed_by="bob", reason="duplicate"))
                outcome["bob"] = "dismissed"
            except Refused as refused:
                outcome["bob"] = str(refused)

    with first, first.transaction():
        resolve(first, key, Decider(performed_by="alice", reason="found"), provider_id="re_a")
        bob = threading.Thread(target=second_person)
        bob.start()
        wait_for(lambda: waiting_on_a_lock(db), what="the second decision to wait for the first")
        assert bob.is_alive()
    bob.join(timeout=10)
    assert f"{key} was sent at" in outcome["bob"] and "alice recorded" in outcome["bob"]
    after = row(db, key)
    assert (after["status"], after["review_reason"]) == ("sent", None)
    assert [a["performed_by"] for a in actions(db, key)] == ["alice"]


# --- end to end -----------------------------------------------------------------


def drain(environ: dict[str, str], provider_url: str) -> None:
    """One `receipts worker` run (without its signal handlers) against the fake provider."""
    settings = load_settings(
        {**environ, "RESEND_API_KEY": "re_ops_test", "RESEND_API_URL": provider_url}
    )
    provider = provider_from_settings(settings, concurrency=2)
    try:
        summary = run_worker(settings, provider, concurrency=2)
    finally:
        provider.close()
    assert summary.error is None


def test_a_rejected_address_is_resent_to_the_right_one_and_delivered(
    client: FlaskClient, operator_env: dict[str, str], db: Db, capsys: Any
) -> None:
    """The whole incident with real parts: Stripe webhook, the worker against a provider
    that rejects the address (review), `resend --to` and `dismiss`, the worker sending
    the copy under its own key and tag, and the delivery webhook marking it delivered."""
    body = encode(stripe_events.event(stripe_events.invoice(id="in_1E2E")))
    client.post(
        "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
    )
    key = "platform/test/in_1E2E/invoice-paid"
    with running_fake_provider() as fake:
        fake.script({"status": 422, "name": "validation_error"})
        drain(operator_env, fake.url)
        assert (row(db, key)["status"], row(db, key)["review_reason"]) == (
            "review",
            "validation_error",
        )
        assert main(["status"], operator_env) == 1

        assert (
            review(operator_env, "resend", key, "--to", "ap@example.org", "--reason", "typo") == 0
        )
        assert main(["status"], operator_env) == 0  # the resend settled the original
        drain(operator_env, fake.url)
        [delivery] = fake.deliveries()

    copy_key = key + "/resend-1"
    copy = row(db, copy_key)
    assert copy["status"] == "sent" and delivery["key"] == copy_key
    sent = json.loads(delivery["body"])
    assert sent["to"] == ["ap@example.org"]
    assert sent["tags"] == [
        {"name": "message_key", "value": "platform_test_in_1E2E_invoice-paid_resend-1"}
    ]

    app = create_app(load_settings({**operator_env, "RESEND_WEBHOOK_SECRET": RESEND_SECRET}))
    try:
        answer = post_resend(
            app.test_client(), resend_event("email.delivered", copy["provider_id"])
        )
    finally:
        app.extensions["receipts"].database.close()
    assert answer.json["outcome"] == "applied"
    capsys.readouterr()
    assert main(["status"], operator_env) == 0
    assert main(["show", "in_1E2E"], operator_env) == 0
    out = capsys.readouterr().out
    assert f"resent as     {copy_key} (sent " in out
    assert "resend by carol: typo" in out and f'"new_key": "{copy_key}"' in out
    assert '"previous_to": "jenny.rosen@example.com"' in out and '"to": "ap@example.org"' in out
    assert "delivery      delivered" in out


@pytest.mark.parametrize(
    ("sent_at", "problem"),
    [
        ("2099-01-01T00:00:00Z", "is in the future"),
        ("0001-01-01T00:00:00+14:00", "is before 2000-01-01"),
        ("1999-12-31T23:59:59Z", "is before 2000-01-01"),
        ("yesterday", "is not an ISO 8601 time"),
        ("2026-10-01T12:00:00", "has no UTC offset (add Z or +00:00)"),
    ],
)
def test_resolve_refuses_a_sent_time_outside_2000_to_now(
    operator_env: dict[str, str], db: Db, capsys: Any, sent_at: str, problem: str
) -> None:
    """`--sent-at` must be a time with an offset between 2000-01-01 and now (plus the
    clock skew allowed): one line, exit 1, the row and the action log unchanged."""
    key = insert_row(db, "in_1When", status="review", review_reason="retry_window_elapsed")
    before = row(db, key)
    code = review(
        operator_env, "resolve", key, "--provider-id", "re_1",
        "--sent-at", sent_at, "--reason", "found it",
    )  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert err == f"receipts review resolve: --sent-at '{sent_at}' {problem}\n"
    assert unchanged(db, key, before)


@pytest.mark.parametrize("by", [" ", "", "carol\nroot", "carol\x1b[2J", "x" * 201])
def test_a_decision_needs_an_operator_name_on_one_line(
    operator_env: dict[str, str], db: Db, capsys: Any, by: str
) -> None:
    """`--by` blank, multi-line, with control characters or overlong: refused with one
    line, exit 1, nothing changed (a blank name would hide who decided)."""
    key = insert_row(db, "in_1By", status="review", review_reason="retry_window_elapsed")
    before = row(db, key)
    assert review(operator_env, "dismiss", key, "--reason", "dup", "--by", by) == 1
    err = capsys.readouterr().err
    assert err.startswith("receipts review dismiss: --by ") and len(err.splitlines()) == 1
    assert unchanged(db, key, before)


def test_a_named_operator_is_recorded_without_surrounding_spaces(
    operator_env: dict[str, str], db: Db
) -> None:
    """`--by '  erin '` records 'erin'."""
    key = insert_row(db, "in_1Trim", status="review", review_reason="retry_window_elapsed")
    assert review(operator_env, "dismiss", key, "--reason", "dup", "--by", "  erin ") == 0
    [action] = actions(db, key)
    assert action["performed_by"] == "erin"
