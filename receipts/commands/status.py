"""``receipts status [--json]``: counts, ages, and whether a person is needed.

Exit codes, so the command can run as a platform health check:

* 0: nothing needs a person;
* 1: a receipt is in ``review`` (dismissed and resent ones excepted), the oldest ready
  ``pending`` row has waited longer than ``--max-pending-age`` (default
  ``RECEIPTS_MAX_PENDING_AGE`` seconds, 15 minutes unless set), sending is
  paused by a quota, the provider is failing (its recent answers are all
  retries), or Resend failed or suppressed a receipt in the last 24 h;
* 2: configuration error; 3: database unavailable.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from receipts.commands import database_settings
from receipts.delivery.sending_pause import describe_reason
from receipts.formatting import duration, iso, utc
from receipts.operations.snapshot import read_only_snapshot
from receipts.operations.status_summary import Status, read_status
from receipts.operations.stripe_status import read_stripe_status, stripe_lines, stripe_problems

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smh]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m`` or ``2h`` as seconds."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 900, 15m or 1h)")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--max-pending-age",
        type=parse_duration,
        default=None,
        metavar="DURATION",
        help="a ready pending row older than this needs a person "
        "(default RECEIPTS_MAX_PENDING_AGE seconds, else 15m)",
    )


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    settings, database_url = database_settings(environ)
    with read_only_snapshot(database_url) as conn:
        status = read_status(conn, retry_cutoff_hours=settings.retry_cutoff_hours)
        stripe_side = read_stripe_status(conn)
    max_pending_age = (
        settings.max_pending_age if args.max_pending_age is None else args.max_pending_age
    )
    problems = needs_person(status, max_pending_age) + stripe_problems(stripe_side, max_pending_age)
    if args.json:
        document = status.as_dict() | stripe_side.as_dict()
        document["max_pending_age_seconds"] = max_pending_age
        document["retry_cutoff_hours"] = settings.retry_cutoff_hours
        document["needs_person"] = problems
        print(json.dumps(document, indent=2, sort_keys=True, default=str))
    else:
        print(
            render(
                status,
                max_pending_age,
                settings.retry_cutoff_hours,
                problems,
                more=stripe_lines(stripe_side),
            )
        )
    return 1 if problems else 0


def needs_person(status: Status, max_pending_age: float) -> list[str]:
    problems = [_pause_line(pause) for pause in status.sending_pauses]
    failing = status.provider_failing
    if failing is not None:
        problems.append(
            f"provider failing since {iso(failing['since'])}: its last {failing['failures']} "
            "answers were all retries (timeouts, 5xx, connection errors); see the worker's log"
        )
    lost = status.not_delivered_needing_a_person
    if lost:
        problems.append(
            f"{len(lost)} receipt(s) not delivered in the last 24 h (Resend failed or "
            "suppressed them): see `receipts show KEY` below"
        )
    if status.open_review:
        problems.append(f"{status.open_review} receipt(s) in review: see `receipts review list`")
    oldest = status.oldest_pending_age_seconds
    if oldest is not None and oldest > max_pending_age:
        why = "sending is paused" if status.sending_pauses else "is a worker running?"
        problems.append(
            f"the oldest ready pending receipt has waited {duration(oldest)} "
            f"(limit {duration(max_pending_age)}): {why}"
        )
    return problems


def _pause_line(pause: dict[str, Any]) -> str:
    """``sending paused: daily quota until 2026-12-01 00:00 UTC (…)``."""
    return (
        f"sending paused: {describe_reason(pause['reason'])} until {utc(pause['paused_until'])} "
        f"(recorded by worker {pause['worker_id']} at {utc(pause['paused_at'])}; "
        "`receipts worker --resume` once the plan is upgraded)"
    )


def _delivery_problem_lines(status: Status) -> list[str]:
    """Sent receipts that did not arrive: the customer got none, nobody else will say so."""
    problems = status.delivery_problems_24h
    if not problems:
        return ["not delivered   none failed, suppressed, bounced or marked as spam in 24 h"]
    counts = ", ".join(
        f"{kind} {sum(1 for p in problems if p['delivery_status'] == kind)}"
        for kind in dict.fromkeys(p["delivery_status"] for p in problems)
    )
    lines = [f"not delivered   {len(problems)} in the last 24 h: {counts} (receipts show KEY):"]
    lines += [
        f"                {problem['delivery_status']:<10} {problem['message_key']}"
        + (f"  ({problem['delivery_detail']})" if problem.get("delivery_detail") else "")
        for problem in problems[:20]
    ]
    if len(problems) > 20:
        lines.append(f"                … and {len(problems) - 20} more (--json lists all)")
    return lines


def _sending_lines(status: Status) -> list[str]:
    """Whether the worker can send: a quota pause, a failing provider, or neither."""
    lines = [
        f"sending         paused: {describe_reason(pause['reason'])} until "
        f"{utc(pause['paused_until'])} ({pause['provider']})"
        for pause in status.sending_pauses
    ]
    failing = status.provider_failing
    if failing is not None:
        lines.append(
            f"provider        failing since {iso(failing['since'])}: {failing['failures']} "
            f"retries in a row, the latest {iso(failing['latest'])}"
        )
    return lines or ["sending         not paused; the provider is not failing"]


def render(
    status: Status,
    max_pending_age: float,
    cutoff_hours: float,
    problems: list[str],
    more: Sequence[str] = (),
) -> str:
    counts = "  ".join(f"{name} {count}" for name, count in status.counts.items())
    lines = [f"outbox          {counts}"]
    lines.append(
        f"oldest pending  {duration(status.oldest_pending_age_seconds)} "
        f"(limit {duration(max_pending_age)})"
    )
    if status.closest_to_cutoff_key is not None:
        lines.append(
            f"retry cutoff    {duration(status.retry_cutoff_remaining_seconds)} left "
            f"({cutoff_hours:g} h after first attempt) for {status.closest_to_cutoff_key}"
        )
    else:
        lines.append("retry cutoff    no receipt is being retried")
    reasons = ", ".join(f"{reason} {n}" for reason, n in status.review_by_reason.items())
    lines.append(
        f"review          {status.open_review} open{': ' + reasons if reasons else ''}"
        f" ({status.dismissed} dismissed, {status.resent} resent)"
    )
    lines.append(
        f"last 24 h       lease recoveries {status.lease_recoveries_24h}, "
        f"conflicts {status.conflicts_24h}, "
        f"delivery events for unknown emails {status.unknown_delivery_events_24h}, "
        f"for sends never recorded {status.evidence_delivery_events_24h}"
    )
    lines += _sending_lines(status)
    lines.append(f"abandoned       {status.abandoned_attempts} attempt(s) not yet recovered")
    lines += _delivery_problem_lines(status)
    lines.append(
        f"sent            last hour {status.sent_last_hour}, last day {status.sent_last_day}"
    )
    lines += more
    lines.append("")
    if problems:
        lines.extend(f"NEEDS A PERSON: {problem}" for problem in problems)
    else:
        lines.append("ok: nothing needs a person")
    return "\n".join(lines)
