"""The console's decisions: resolve, retry, resend (to a corrected address) and dismiss.

Each is the command line's own operation (:mod:`receipts.operations.
review_decisions`, :mod:`receipts.operations.resending`), with the same
guards and refusals, recorded under the console user's name (the CLI's
``--by``) and the reason the form asks for. The decision page says what will
happen before anyone presses the button. Only operators see these pages;
a viewer gets 403.

The form carries what the page showed (the receipt's status, reason,
resend and last change): if the receipt changed since, the decision is
refused and the page shown again, so a person only ever decides about the
state they saw. A refusal changes nothing and is shown in the guard's words;
the flags it names are the form's checkboxes.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime
from typing import Any

from flask import abort, redirect, render_template, request, url_for
from werkzeug.wrappers import Response as WerkzeugResponse

from receipts.console_users import ConsoleUser
from receipts.db import Connection
from receipts.logs import log_fields
from receipts.operations.lookup import look_up
from receipts.operations.operator_input import InvalidInput, parse_sent_at
from receipts.operations.resending import resend
from receipts.operations.review import Decider, Refused
from receipts.operations.review_decisions import dismiss, resolve, retry
from receipts.operations.timeline import read_timeline
from receipts.vocabulary import ReviewReason, RowStatus
from receipts.web.console.blueprint import blueprint, signed_in_user
from receipts.web.console.context import console

log = logging.getLogger("receipts.web.console")

ACTIONS = ("resend", "retry", "resolve", "dismiss")
# Reasons ingest writes: the invoice as Stripe sent it makes no email, so a retry
# would fail the same way (review_decisions.retry refuses it); a resend to an
# address, or a dismissal, settles these.
_NOTHING_TO_RETRY = frozenset(
    {
        ReviewReason.MISSING_CUSTOMER_EMAIL,
        ReviewReason.INVALID_CUSTOMER_EMAIL,
        ReviewReason.INVALID_HOSTED_INVOICE_URL,
        ReviewReason.INVALID_AMOUNT_PAID,
        ReviewReason.INVALID_CURRENCY,
        ReviewReason.INVALID_INVOICE_AMOUNTS,
    }
)
MAX_REASON_LENGTH = 2000
MAX_FIELD_LENGTH = 320
_CHANGED = (
    "This receipt changed since the page was opened (someone else may have decided). Read "
    "what it shows now and decide again."
)


def offered(row: dict[str, Any]) -> list[str]:
    """The decisions the receipt page offers for a row in this state."""
    if row["status"] == RowStatus.SENT:
        return ["resend"]
    if row["status"] != RowStatus.REVIEW or row.get("resent_as"):
        # on its way, or settled by a resend: decide about that email instead
        return []
    choices = list(ACTIONS)
    if row["review_reason"] in _NOTHING_TO_RETRY:
        choices.remove("retry")  # the invoice cannot become an email as Stripe sent it
    if row["review_reason"] == ReviewReason.DISMISSED:
        choices.remove("dismiss")
    return choices


def seen_mark(row: dict[str, Any]) -> str:
    """A short digest of the state the page showed; a change since refuses the decision."""
    state = "|".join(
        str(row.get(name))
        for name in ("status", "review_reason", "resent_as", "updated_at", "delivery_status")
    )
    return hashlib.sha256(state.encode()).hexdigest()[:16]


@blueprint.get("/receipt/<path:key>/decide/<action>")
def decide(key: str, action: str) -> str:
    _operator_only(action)
    with console().reading() as conn:
        row = _row(conn, key)
    return render_template("console/decide.html", **_page(row, action))


@blueprint.post("/receipt/<path:key>/decide/<action>")
def decided(key: str, action: str) -> str | tuple[str, int] | WerkzeugResponse:
    user = _operator_only(action)
    form = request.form
    with console().reading() as conn:
        row = _row(conn, key)
    page = _page(row, action)
    try:
        decider = Decider(performed_by=user.name, reason=_reason(form.get("reason", "")))
        options = _options(action, form)
    except InvalidInput as invalid:
        return render_template("console/decide.html", **page, problem=str(invalid)), 400
    if form.get("seen") != seen_mark(row):
        return render_template("console/decide.html", **page, problem=_CHANGED), 409
    try:
        with console().writing() as conn:
            _apply(conn, action, key, decider, options)
    except Refused as refused:
        log_fields(log, "console decision refused", action=action, key=key, by=user.name)
        return render_template("console/decide.html", **page, refused=str(refused)), 409
    log_fields(log, "operator decision", action=action, key=key, by=user.name, via="console")
    return redirect(url_for("console.receipt", key=key, decided=action), code=303)


def _operator_only(action: str) -> ConsoleUser:
    if action not in ACTIONS:
        abort(404, f"There is no decision called {action!r}.")
    user = signed_in_user()
    if not user.may_decide:
        abort(403, "Only a console operator can take decisions; you can read everything.")
    return user


def _row(conn: Connection, key: str) -> dict[str, Any]:
    if "/" not in key or len(key) > MAX_FIELD_LENGTH:
        abort(404, "There is no receipt with that key.")
    if key not in look_up(conn, key).keys:
        abort(404, "There is no receipt with that key.")
    return read_timeline(conn, key).row


def _page(row: dict[str, Any], action: str) -> dict[str, Any]:
    return {
        "row": row,
        "action": action,
        "seen": seen_mark(row),
        "current_recipient": _current_recipient(row),
        "offered": offered(row),
        "dismissed": row["review_reason"] == ReviewReason.DISMISSED,
        "form": request.form,
    }


def _current_recipient(row: dict[str, Any]) -> str | None:
    recipients = row.get("recipients") or []
    return recipients[0] if recipients else row.get("customer_email")


def _reason(text: str) -> str:
    reason = text.strip()
    if not reason:
        raise InvalidInput("Say why, in the reason field: it is recorded with the decision.")
    if len(reason) > MAX_REASON_LENGTH:
        raise InvalidInput(f"The reason may have at most {MAX_REASON_LENGTH} characters.")
    return reason


def _options(action: str, form: Any) -> dict[str, Any]:
    """The decision's own fields, checked as the command line checks its options."""
    options: dict[str, Any] = {}
    if action in ("resend", "retry", "resolve"):
        options["accept_duplicate_risk"] = form.get("accept_duplicate_risk") == "1"
        options["undo_dismiss"] = form.get("undo_dismiss") == "1"
    if action == "resend":
        to = form.get("to", "").strip()
        if len(to) > MAX_FIELD_LENGTH:
            raise InvalidInput("That address is too long to be an email address.")
        options["to"] = to or None
    if action == "resolve":
        provider_id = form.get("provider_id", "").strip()
        if not provider_id or len(provider_id) > MAX_FIELD_LENGTH:
            raise InvalidInput("Give the email's id from the provider's logs.")
        options["provider_id"] = provider_id
        sent_at = form.get("sent_at", "").strip()
        options["sent_at"] = _sent_at(sent_at) if sent_at else None
    return options


def _sent_at(text: str) -> datetime:
    return parse_sent_at(text, label="Sent at")


def _apply(
    conn: Connection, action: str, key: str, decider: Decider, options: dict[str, Any]
) -> None:
    if action == "resend":
        resend(conn, key, decider, **options)
    elif action == "retry":
        retry(
            conn, key, decider, retry_cutoff_hours=console().settings.retry_cutoff_hours, **options
        )
    elif action == "resolve":
        resolve(conn, key, decider, **options)
    else:
        dismiss(conn, key, decider)
