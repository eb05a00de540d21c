"""The console's reading pages: search, a receipt's timeline, the review queue, status.

Each page reads one consistent snapshot through the same operations as the
command line (``receipts show``, ``review list``, ``status``), so the console
and a terminal never disagree. Only :mod:`.decisions` changes anything.
"""

from __future__ import annotations

from flask import abort, redirect, render_template, request, url_for
from werkzeug.wrappers import Response as WerkzeugResponse

from receipts.formatting import duration, utc
from receipts.operations.lookup import MESSAGE_KEY, event_verdict, look_up
from receipts.operations.review import count_settled, list_review
from receipts.operations.status_summary import Status, read_status
from receipts.operations.stripe_status import read_stripe_status, stripe_problems
from receipts.operations.timeline import read_timeline, unrecorded_sends
from receipts.web.console import decisions, presenting
from receipts.web.console.blueprint import blueprint, signed_in_user
from receipts.web.console.chart import read_chart
from receipts.web.console.context import console

MAX_QUERY_LENGTH = 320  # the longest address or key worth looking up


@blueprint.get("/")
def search() -> str | tuple[str, int] | WerkzeugResponse:
    query = request.args.get("q", "").strip()
    if not query:
        return render_template("console/search.html", query="", found=None)
    if len(query) > MAX_QUERY_LENGTH or not query.isprintable():
        return render_template(
            "console/search.html",
            query=query[:MAX_QUERY_LENGTH],
            found=None,
            problem="That is not something a receipt can be found by.",
        ), 400
    with console().reading() as conn:
        found = look_up(conn, query)
        rows = [read_timeline(conn, key).row for key in found.keys]
    if len(rows) == 1 and not found.events and found.thin_event is None:
        return redirect(url_for("console.receipt", key=rows[0]["message_key"]), code=303)
    return render_template(
        "console/search.html",
        query=query,
        found=found,
        rows=rows,
        verdicts={event["event_id"]: event_verdict(event) for event in found.events},
        nothing_hint=found.empty and found.kind != MESSAGE_KEY,
    )


@blueprint.get("/receipt/<path:key>")
def receipt(key: str) -> str:
    with console().reading() as conn:
        found = look_up(conn, key)
        if key not in found.keys:
            abort(404, f"No receipt has the key {key}.")
        timeline = read_timeline(conn, key)
        family = look_up(conn, timeline.row["invoice_id"]).keys
        others = [read_timeline(conn, other).row for other in family if other != key]
    return render_template(
        "console/receipt.html",
        timeline=timeline,
        row=timeline.row,
        entries=presenting.entries(timeline),
        others=others,
        unrecorded=unrecorded_sends(timeline.deliveries),
        user=signed_in_user(),
        choices=decisions.offered(timeline.row),
        decided=request.args.get("decided")
        if request.args.get("decided") in decisions.ACTIONS
        else None,
    )


@blueprint.get("/review")
def review_queue() -> str:
    reason = request.args.get("reason", "").strip() or None
    include_settled = request.args.get("all") == "1"
    with console().reading() as conn:
        rows = list_review(conn, reason=reason, include_settled=include_settled)
        settled = count_settled(conn, reason=reason)
        reasons = sorted(read_status(conn, retry_cutoff_hours=24).review_by_reason)
    return render_template(
        "console/review.html",
        rows=rows,
        reason=reason,
        reasons=reasons,
        include_settled=include_settled,
        settled=settled,
    )


@blueprint.get("/status")
def status() -> str:
    here = console()
    settings = here.settings
    with here.reading() as conn:
        summary = read_status(conn, retry_cutoff_hours=settings.retry_cutoff_hours)
        stripe_side = read_stripe_status(conn)
        chart = read_chart(conn, here.clock(), settings.timezone)
    return render_template(
        "console/status.html",
        status=summary,
        attention=_needs_attention(summary, settings.max_pending_age),
        stripe_problems=stripe_problems(stripe_side, settings.max_pending_age),
        chart=chart,
        max_pending_age=settings.max_pending_age,
        retry_cutoff_hours=settings.retry_cutoff_hours,
    )


def _needs_attention(summary: Status, max_pending_age: float) -> list[dict[str, str]]:
    """What ``receipts status`` would call a problem, as lines with a link where one helps."""
    found = [
        _line(f"Sending is paused ({pause['reason']}) until {utc(pause['paused_until'])}.")
        for pause in summary.sending_pauses
    ]
    failing = summary.provider_failing
    if failing is not None:
        found.append(
            _line(
                f"The email provider is failing since {utc(failing['since'])}: its last "
                f"{failing['failures']} answers were all retries (timeouts, 5xx, connection "
                "errors)."
            )
        )
    lost = summary.not_delivered_needing_a_person
    if lost:
        found.append(_line(f"{len(lost)} receipt(s) were not delivered in the last 24 h."))
    if summary.open_review:
        found.append(
            _line(
                f"{summary.open_review} receipt(s) need a person.",
                link=url_for("console.review_queue"),
                link_text="Open the review queue",
            )
        )
    oldest = summary.oldest_pending_age_seconds
    if oldest is not None and oldest > max_pending_age:
        found.append(
            _line(
                f"The oldest receipt waiting to be sent has waited {duration(oldest)} "
                f"(limit {duration(max_pending_age)}): is a worker running?"
            )
        )
    return found


def _line(text: str, **link: str) -> dict[str, str]:
    return {"text": text, **link}
