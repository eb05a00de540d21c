"""The guards every decision shares: what makes a second email possible, and dismissal.

A decision that could make the provider accept a second email of one family
(docs/architecture.md, "Operator decisions") names each reason in its refusal:

* another email of the family is on its way (pending or processing): always
  refused, wait for it;
* another email of the family was sent, or may have been (an attempt without
  a definite refusal, or Resend reporting a send no row recorded): refused
  unless the person accepts the duplicate risk;
* for a new key (a resend), the same about the receipt itself.

A dismissed receipt is final: a decision about it needs ``--undo-dismiss``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from receipts.operations.receipt_family import (
    ON_ITS_WAY,
    Family,
    attempt_phrase,
    evidence_phrase,
    resent_phrase,
    state_phrase,
)
from receipts.operations.review import Refused
from receipts.vocabulary import ReviewReason, RowStatus

RISK_FLAG = "--accept-duplicate-risk"
UNDO_DISMISS_FLAG = "--undo-dismiss"


@dataclass(frozen=True, kw_only=True)
class Risk:
    """One way the customer could get a second email, in the words of a refusal."""

    text: str
    on_its_way: bool = False  # another email is pending/processing: no flag overrides it


def risks_from_the_family(family: Family, *, possible_sends: bool = True) -> list[Risk]:
    """What the family's other emails make possible if this one is sent too: those
    sent or on their way, and (``possible_sends``) those that may have been sent."""
    risks: list[Risk] = []
    for other in family.others():
        key = other["message_key"]
        phrase = _related_phrase(family, key)
        if other["status"] in ON_ITS_WAY:
            risks.append(Risk(text=phrase, on_its_way=True))
        elif other["status"] == RowStatus.SENT:
            risks.append(Risk(text=phrase))
        elif possible_sends:
            risks += _possible_sends(family, key)
    return risks


def risks_of_a_new_key(family: Family) -> list[Risk]:
    """What a new key (a resend) risks about the receipt itself: it was or may have been sent."""
    if family.row["status"] == RowStatus.SENT:
        return [Risk(text=state_phrase(family, family.key))]
    return _possible_sends(family, family.key)


def _possible_sends(family: Family, key: str) -> list[Risk]:
    """The first attempt of ``key`` the provider may have accepted, and Resend's reports."""
    risks = [Risk(text=attempt_phrase(key, attempt)) for attempt in family.uncertain_attempts(key)]
    risks = risks[:1]
    risks += [Risk(text=evidence_phrase(key, send)) for send in family.evidence.get(key, [])]
    return risks


def _related_phrase(family: Family, other: str) -> str:
    """``KEY was resent as OTHER at …`` when OTHER resends the decided key, else OTHER's state."""
    created = family.last_action(other, "resend_created")
    resends_this = created is not None and created["details"].get("resend_of") == family.key
    if family.row.get("resent_as") == other or resends_this:
        return resent_phrase(family, family.key, other)
    return state_phrase(family, other)


def refuse_on_risks(
    risks: list[Risk], *, accept_risk: bool, consequence: str, rerun_if: str
) -> list[str]:
    """Refused when a risk stands in the way; the risks accepted otherwise (for the record)."""
    waiting = [risk for risk in risks if risk.on_its_way]
    if waiting:
        raise Refused(
            f"{waiting[0].text}; {consequence}. Wait until it is sent or in review, then decide."
        )
    if risks and not accept_risk:
        named = "; ".join(risk.text for risk in risks)
        raise Refused(f"{named}; {consequence}. Rerun with {RISK_FLAG} if {rerun_if}.")
    return [risk.text for risk in risks]


def refuse_if_dismissed(family: Family, *, undo: bool, verb: str) -> str | None:
    """Refused for a dismissed receipt unless the dismissal is undone; its earlier reason."""
    row = family.row
    if row["status"] != RowStatus.REVIEW or row["review_reason"] != ReviewReason.DISMISSED:
        return None
    if not undo:
        raise Refused(
            f"{state_phrase(family, family.key)}; a dismissal is final. Rerun with "
            f"{UNDO_DISMISS_FLAG} if it should be {verb} after all (the undoing is recorded)."
        )
    dismissal = family.last_action(family.key, "dismiss")
    details: dict[str, Any] = dismissal["details"] if dismissal else {}
    previous = details.get("previous_reason")
    return previous if isinstance(previous, str) else None


def refuse_unless_in_review(family: Family, verb: str) -> None:
    """Only a receipt in review waits for a person; any other state says what happened."""
    if family.row["status"] != RowStatus.REVIEW:
        raise Refused(f"{state_phrase(family, family.key)}; only a receipt in review can be {verb}")
