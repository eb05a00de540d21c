"""``receipts import``: receipts an earlier system sent are never sent again."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from receipts.cli import main
from tests import stripe_events
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
    assert "line 2: platform/live/in_1Twice/invoice-paid is already recorded as sent" in out
    assert "imported 0 sent receipt(s), skipped 1" in out
    assert len(actions(db, "platform/live/in_1Twice/invoice-paid")) == 1


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
