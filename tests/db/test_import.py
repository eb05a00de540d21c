"""``receipts import``: receipts an earlier system sent are never sent again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from receipts.cli import main
from receipts.config import load_settings
from receipts.delivery.configured import provider_from_settings
from receipts.delivery.worker import run_worker
from tests import stripe_events
from tests.fake_provider import running_fake_provider
from tests.outbox_states import Db, actions, insert_row, row
from tests.stripe_events import TEST_SECRET, encode, sign

HEADER = "invoice_id,account,mode,sent_at,provider_id\n"


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "old_sender.csv"
    path.write_text(text)
    return str(path)


def outbox_count(db: Db) -> int:
    found = db.execute("SELECT count(*) AS n FROM email_outbox").fetchone()
    assert found is not None
    return int(found["n"])


def test_imported_receipts_are_sent_rows(
    environ: dict[str, str], db: Db, tmp_path: Path, capsys: Any
) -> None:
    """Each line becomes a sent row under the key ingest computes, with a trace."""
    path = write(
        tmp_path,
        HEADER
        + "in_1Old1,platform,live,2026-10-01T12:00:00Z,re_old1\n"
        + "in_1Old2,acct_1Conn,test,2026-10-02T08:30:00+02:00,\n",
    )
    assert main(["import", path, "--by", "erin"], environ) == 0
    assert "imported 2 sent receipt(s), skipped 0" in capsys.readouterr().out
    first = row(db, "platform/live/in_1Old1/invoice-paid")
    assert (first["status"], first["provider_id"], first["payload"]) == ("sent", "re_old1", None)
    assert first["sent_at"] == datetime(2026, 10, 1, 12, tzinfo=UTC)
    assert first["fingerprint"].startswith("imported:")
    second = row(db, "acct_1Conn/test/in_1Old2/invoice-paid")
    assert second["provider_id"] is None and second["livemode"] is False
    [action] = actions(db, "platform/live/in_1Old1/invoice-paid")
    assert (action["action"], action["performed_by"]) == ("import", "erin")
    assert action["reason"] == "imported from old_sender.csv" and action["details"]["line"] == 2


def test_a_later_stripe_event_for_an_imported_receipt_sends_nothing(
    client: FlaskClient, environ: dict[str, str], db: Db, tmp_path: Path
) -> None:
    """After the switch-over a replayed invoice.paid finds the key taken: no new row,
    nothing pending, the imported row kept as it was."""
    path = write(tmp_path, HEADER + "in_1Replayed,platform,test,2026-10-01T12:00:00Z,re_o\n")
    assert main(["import", path], environ) == 0
    key = "platform/test/in_1Replayed/invoice-paid"
    before = row(db, key)
    body = encode(stripe_events.event(stripe_events.invoice(id="in_1Replayed")))
    response = client.post(
        "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
    )
    assert response.status_code == 200
    assert response.json is not None and response.json["outcome"] == "duplicate"
    assert row(db, key) == before
    assert outbox_count(db) == 1


def test_every_malformed_line_is_reported_and_nothing_is_imported(
    environ: dict[str, str], db: Db, tmp_path: Path, capsys: Any
) -> None:
    """All problems, each with its line number; the good lines are not stored either."""
    path = write(
        tmp_path,
        HEADER
        + "in_1Good,platform,live,2026-10-01T12:00:00Z,re_1\n"
        + "inv_bad,platform,live,2026-10-01T12:00:00Z,re_2\n"
        + "in_1X,someone,live,2026-10-01T12:00:00Z,re_3\n"
        + "in_1Y,platform,prod,2026-10-01T12:00:00Z,re_4\n"
        + "in_1Z,platform,live,yesterday,re_5\n"
        + "in_1W,platform,live,2026-10-01T12:00:00,re_6\n"
        + "in_1V,platform,live\n"
        + "in_1Good,platform,live,2026-10-01T13:00:00Z,re_7\n"
        + "in_1U,platform,live,2999-01-01T00:00:00Z,re_8\n",
    )
    assert main(["import", path], environ) == 1
    err = capsys.readouterr().err
    for line, problem in [
        (3, "is not a Stripe invoice id"),
        (4, "must be 'platform' or a Connect id"),
        (5, "must be live or test"),
        (6, "is not an ISO 8601 time"),
        (7, "has no UTC offset"),
        (8, "expected 5 fields, got 3"),
        (9, "same receipt as line 2"),
        (10, "is in the future"),
    ]:
        assert f"line {line}: " in err and problem in err, (line, problem)
    assert "line 2:" not in err
    assert "nothing imported (8 problem(s))" in err
    assert outbox_count(db) == 0


def test_header_is_required(environ: dict[str, str], tmp_path: Path, capsys: Any) -> None:
    path = write(tmp_path, "in_1A,platform,live,2026-10-01T12:00:00Z,re_1\n")
    assert main(["import", path], environ) == 1
    assert "line 1: the header must be exactly" in capsys.readouterr().err


def test_already_sent_keys_are_skipped_and_reported(
    environ: dict[str, str], db: Db, tmp_path: Path, capsys: Any
) -> None:
    """Importing the same file twice is harmless: the second run skips every line."""
    path = write(tmp_path, HEADER + "in_1Twice,platform,live,2026-10-01T12:00:00Z,re_1\n")
    assert main(["import", path], environ) == 0
    capsys.readouterr()
    assert main(["import", path], environ) == 0
    out = capsys.readouterr().out
    assert "line 2: platform/live/in_1Twice/invoice-paid was imported before; skipped" in out
    assert "imported 0 sent receipt(s), skipped 1" in out
    assert len(actions(db, "platform/live/in_1Twice/invoice-paid")) == 1


def sent_by_us(client: FlaskClient, environ: dict[str, str], invoice_id: str) -> dict[str, Any]:
    """A live receipt as this system sends it: the Stripe webhook, then a worker run
    against the fake provider; the sent row."""
    body = encode(stripe_events.event(stripe_events.invoice(id=invoice_id), livemode=True))
    client.post(
        "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
    )
    with running_fake_provider() as fake:
        settings = load_settings(
            {**environ, "RESEND_API_KEY": "re_imp", "RESEND_API_URL": fake.url}
        )
        provider = provider_from_settings(settings, concurrency=1)
        try:
            assert run_worker(settings, provider, concurrency=1).sent == 1
        finally:
            provider.close()
    return {"key": f"platform/live/{invoice_id}/invoice-paid"}


def test_a_receipt_this_system_sent_is_reported_as_ours_and_a_second_send_as_sent_twice(
    client: FlaskClient, environ: dict[str, str], db: Db, tmp_path: Path, capsys: Any
) -> None:
    """The switch-over race: the webhook's receipt was sent by receipts, and the earlier
    sender's log lists the same invoice. Same provider id: "already sent by receipts at …
    (provider id …)", exit 0. Another provider id: "sent twice: ours … and the imported …",
    recorded on the receipt, exit 1. No id in the file: ours, with what to look up. The
    free lines are imported all the same, and nothing of our row changes."""
    ours = {
        inv: sent_by_us(client, environ, inv)["key"]
        for inv in ("in_1Same", "in_1Twice", "in_1NoId")
    }
    ids = {inv: row(db, key)["provider_id"] for inv, key in ours.items()}
    before = {key: row(db, key) for key in ours.values()}
    path = write(
        tmp_path,
        HEADER
        + f"in_1Same,platform,live,2026-10-01T12:00:00Z,{ids['in_1Same']}\n"
        + "in_1Twice,platform,live,2026-10-01T12:00:00Z,re_earlier_sender\n"
        + "in_1NoId,platform,live,2026-10-01T12:00:00Z,\n"
        + "in_1Free,platform,live,2026-10-01T12:00:00Z,re_free\n",
    )
    assert main(["import", path, "--by", "erin"], environ) == 1
    captured = capsys.readouterr()
    out = captured.out
    same, twice, no_id = ours["in_1Same"], ours["in_1Twice"], ours["in_1NoId"]
    sent_at = {key: row(db, key)["sent_at"].strftime("%Y-%m-%d %H:%M UTC") for key in ours.values()}
    assert (
        f"line 2: {same} was already sent by receipts at {sent_at[same]} "
        f"(provider id {ids['in_1Same']}); skipped" in out
    )
    assert (
        f"line 3: {twice} was sent twice: ours at {sent_at[twice]} (provider id "
        f"{ids['in_1Twice']}) and the imported one at 2026-10-01 12:00 UTC (provider id "
        "re_earlier_sender); the customer got two receipts" in out
    )
    assert f"line 4: {no_id} was already sent by receipts at {sent_at[no_id]}" in out
    assert "the file gives no provider id, so look it up in the earlier sender's log" in out
    assert "imported 1 sent receipt(s), skipped 3" in out
    assert "1 receipt(s) sent twice" in captured.err
    assert row(db, "platform/live/in_1Free/invoice-paid")["status"] == "sent"
    assert {key: row(db, key) for key in ours.values()} == before
    [found] = [a for a in actions(db, twice) if a["action"] == "import_found_sent_twice"]
    assert found["performed_by"] == "erin"
    assert found["details"]["ours"]["provider_id"] == ids["in_1Twice"]
    assert found["details"]["imported"]["provider_id"] == "re_earlier_sender"
    assert [a["action"] for a in actions(db, same)] == []


def test_a_receipt_we_resent_counts_as_ours_and_a_dismissed_one_is_skipped(
    environ: dict[str, str], db: Db, tmp_path: Path, capsys: Any
) -> None:
    """A review row settled by a resend that was sent: its email is ours (under the resend's
    key). A dismissed row: receipts sent nothing, skipped. A row still in review stops
    the import, naming it."""
    resent = insert_row(db, "in_1Resent", status="review", review_reason="validation_error",
                        livemode=True)  # fmt: skip
    copy = resent + "/resend-1"
    insert_row(db, "in_1Resent", key=copy, status="sent", provider_id="re_copy",
               sent_ago=timedelta(hours=1), livemode=True)  # fmt: skip
    db.execute("UPDATE email_outbox SET resent_as = %s WHERE message_key = %s", (copy, resent))
    dismissed = insert_row(db, "in_1Dismissed", status="review", review_reason="dismissed",
                           livemode=True)  # fmt: skip
    path = write(
        tmp_path,
        HEADER
        + "in_1Resent,platform,live,2026-10-01T12:00:00Z,re_other\n"
        + "in_1Dismissed,platform,live,2026-10-01T12:00:00Z,re_d\n",
    )
    assert main(["import", path], environ) == 1
    out = capsys.readouterr().out
    assert f"line 2: {resent} was sent twice: ours as {copy} at " in out
    assert "(provider id re_copy) and the imported one" in out
    assert f"line 3: {dismissed} was dismissed here: receipts sent no email for it; skipped" in out

    waiting = insert_row(db, "in_1Waiting", status="review", review_reason="validation_error",
                         livemode=True)  # fmt: skip
    blocked = write(tmp_path, HEADER + "in_1Waiting,platform,live,2026-10-01T12:00:00Z,re_w\n")
    assert main(["import", blocked], environ) == 1
    assert f"line 2: {waiting} is already review here" in capsys.readouterr().err
    on_its_way = insert_row(db, "in_1OnItsWay", status="review", review_reason="validation_error",
                            livemode=True)  # fmt: skip
    insert_row(db, "in_1OnItsWay", key=on_its_way + "/resend-1", livemode=True)
    db.execute(
        "UPDATE email_outbox SET resent_as = %s WHERE message_key = %s",
        (on_its_way + "/resend-1", on_its_way),
    )
    blocked = write(tmp_path, HEADER + "in_1OnItsWay,platform,live,2026-10-01T12:00:00Z,re_o\n")
    assert main(["import", blocked], environ) == 1
    assert (
        f"line 2: {on_its_way} is already resent here as {on_its_way}/resend-1, which is pending,"
        in capsys.readouterr().err
    )


def test_a_key_this_system_is_about_to_send_stops_the_import(
    environ: dict[str, str], db: Db, tmp_path: Path, capsys: Any
) -> None:
    """The old sender sent it and our row is pending: two receipts ahead. Nothing imported."""
    pending = insert_row(db, "in_1Both", livemode=True)
    path = write(
        tmp_path,
        HEADER
        + "in_1Other,platform,live,2026-10-01T12:00:00Z,re_1\n"
        + "in_1Both,platform,live,2026-10-01T12:00:00Z,re_2\n",
    )
    assert main(["import", path], environ) == 1
    err = capsys.readouterr().err
    assert f"line 3: {pending} is already pending here" in err
    assert outbox_count(db) == 1 and row(db, pending)["status"] == "pending"


def test_unreadable_file(environ: dict[str, str], tmp_path: Path, capsys: Any) -> None:
    assert main(["import", str(tmp_path / "missing.csv")], environ) == 1
    assert "cannot read" in capsys.readouterr().err
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00bad")
    assert main(["import", str(binary)], environ) == 1
    assert "is not UTF-8 text" in capsys.readouterr().err


def test_an_oversized_field_is_a_one_line_problem_and_nothing_is_imported(
    environ: dict[str, str], db: Db, tmp_path: Path, capsys: Any
) -> None:
    """A field over the CSV reader's 131,072 characters ends in a one-line problem naming
    its line (not a traceback); a long field under it is echoed shortened."""
    path = write(
        tmp_path,
        HEADER
        + "in_1Good,platform,live,2026-10-01T12:00:00Z,re_1\n"
        + "in_1" + "x" * 100_000 + ",platform,live,2026-10-01T12:00:00Z,re_2\n"
        + "in_1Big,platform,live,2026-10-01T12:00:00Z,re_" + "y" * 140_000 + "\n",
    )  # fmt: skip
    assert main(["import", path], environ) == 1
    err = capsys.readouterr().err
    assert "line 3: invoice_id 'in_1xxx" in err and "is not a Stripe invoice id" in err
    assert "line 4: a field is longer than 131072 characters" in err
    assert "nothing imported (2 problem(s))" in err
    assert all(len(line) < 300 for line in err.splitlines())
    assert outbox_count(db) == 0


@pytest.mark.parametrize(
    ("sent_at", "problem"),
    [
        ("0001-01-01T00:00:00+14:00", "is before 2000-01-01"),
        ("1999-12-31T23:59:59Z", "is before 2000-01-01"),
        ("2000-01-01T05:00:00+06:00", "is before 2000-01-01"),
        ("9999-12-31T23:59:59-14:00", "is in the future"),
    ],
)
def test_sent_at_must_lie_between_2000_and_now(
    environ: dict[str, str], db: Db, tmp_path: Path, capsys: Any, sent_at: str, problem: str
) -> None:
    """An import cannot record a receipt sent before 2000 (a year-1 time would be stored
    as a BC date no reader can load) or later than now plus the clock skew allowed."""
    path = write(tmp_path, HEADER + f"in_1When,platform,live,{sent_at},re_1\n")
    assert main(["import", path], environ) == 1
    err = capsys.readouterr().err
    assert f"line 2: sent_at '{sent_at}' {problem}" in err
    assert outbox_count(db) == 0
    first = write(tmp_path, HEADER + "in_1When,platform,live,2000-01-01T00:00:00Z,re_1\n")
    assert main(["import", first], environ) == 0


@pytest.mark.parametrize("by", [" ", "", "erin\nroot", "x" * 201])
def test_the_operator_is_one_line_and_not_blank(
    environ: dict[str, str], db: Db, tmp_path: Path, capsys: Any, by: str
) -> None:
    """`--by` must name someone: blank, multi-line or overlong names are refused with
    one line, and nothing is imported."""
    path = write(tmp_path, HEADER + "in_1By,platform,live,2026-10-01T12:00:00Z,re_1\n")
    assert main(["import", path, "--by", by], environ) == 1
    err = capsys.readouterr().err
    assert err.startswith("receipts import: --by ") and len(err.splitlines()) == 1
    assert outbox_count(db) == 0


def test_a_blank_operator_variable_falls_back_to_the_os_user(
    environ: dict[str, str], db: Db, tmp_path: Path
) -> None:
    """RECEIPTS_OPERATOR set to spaces is not a name: the OS user is recorded instead."""
    path = write(tmp_path, HEADER + "in_1Env,platform,live,2026-10-01T12:00:00Z,re_1\n")
    assert main(["import", path], {**environ, "RECEIPTS_OPERATOR": "  ", "USER": "dana"}) == 0
    [action] = actions(db, "platform/live/in_1Env/invoice-paid")
    assert action["performed_by"] == "dana"
