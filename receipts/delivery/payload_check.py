"""The worker's own look at a frozen email before it is sent.

The row policies of ``sql/roles/least_privilege.sql`` refuse a payload with
fields the product does not write; the worker checks again before every send
(docs/architecture.md, "The frozen payload and the fingerprint"), so a row
written by a stolen credential, by roles whose file was not rerun after an
upgrade, or by a bug is sent nowhere: it goes to review as
``payload_not_ours`` with what was wrong, and nothing reaches the provider.

What the product writes: ``from`` (this worker's ``EMAIL_FROM`` address),
``to`` (one recipient), ``subject``, ``text``, ``html``, the key's own tag,
``reply_to`` only as ``RECEIPTS_REPLY_TO``, and at most one PDF attachment.
The sender fields are compared with this worker's ``EMAIL_FROM`` and
``RECEIPTS_REPLY_TO`` when it has ``EMAIL_FROM`` (set both on every process:
README, "Settings"); display names are not compared: a name changed between
ingest and the first claim is harmless, another address on the verified
domain is not.
"""

from __future__ import annotations

import re
from typing import Any

from receipts.addresses import mailbox_address
from receipts.config import Settings
from receipts.delivery.answers import json_object
from receipts.message_keys import provider_tag
from receipts.receipt.pdf import FILENAME, MAX_ATTACHMENT_BASE64

FIELDS = frozenset({"from", "to", "subject", "text", "html", "tags", "reply_to", "attachments"})
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def payload_problem(key: str, payload: bytes, settings: Settings) -> str | None:
    """Why this frozen email is not one the product wrote; None when it is."""
    document = json_object(payload)
    if not document:
        return "not a JSON object"
    foreign = sorted(set(document) - FIELDS)
    if foreign:
        return f"fields the product does not write: {', '.join(foreign)}"
    for check in (_sender, _recipient, _tag, _reply_to, _attachments):
        problem = check(key, document, settings)
        if problem is not None:
            return problem
    return None


def _sender(key: str, document: dict[str, Any], settings: Settings) -> str | None:
    if _address(document.get("from")) is None:
        return "from is not an address"
    wanted = _address(settings.email_from)
    if wanted is not None and _address(document.get("from")) != wanted:
        return "from is not EMAIL_FROM"
    return None


def _recipient(key: str, document: dict[str, Any], settings: Settings) -> str | None:
    # One recipient; whether it is a deliverable address is the provider's to say.
    to = document.get("to")
    if not (isinstance(to, list) and len(to) == 1 and isinstance(to[0], str)):
        return "to is not one address"
    return None


def _tag(key: str, document: dict[str, Any], settings: Settings) -> str | None:
    # Emails stored by early releases carry no tag; one that has tags has its own.
    if "tags" in document and document["tags"] != [
        {"name": "message_key", "value": provider_tag(key)}
    ]:
        return "tags are not the message key's own"
    return None


def _reply_to(key: str, document: dict[str, Any], settings: Settings) -> str | None:
    if "reply_to" not in document:
        return None
    if _address(document["reply_to"]) is None:
        return "reply_to is not an address"
    if settings.email_from is not None and _address(document["reply_to"]) != _address(
        settings.reply_to
    ):
        return "reply_to is not RECEIPTS_REPLY_TO"
    return None


def _attachments(key: str, document: dict[str, Any], settings: Settings) -> str | None:
    if "attachments" not in document:
        return None
    found = document["attachments"]
    if not (isinstance(found, list) and len(found) == 1 and isinstance(found[0], dict)):
        return "attachments are not one PDF"
    item = found[0]
    content = item.get("content")
    if (
        set(item) != {"filename", "content", "content_type"}
        or not isinstance(item["filename"], str)
        or not FILENAME.fullmatch(item["filename"])
        or item["content_type"] != "application/pdf"
        or not isinstance(content, str)
        or not 4 <= len(content) <= MAX_ATTACHMENT_BASE64
        or not _BASE64.fullmatch(content)
    ):
        return "attachments are not one PDF"
    return None


def _address(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    found = mailbox_address(value)
    return found.lower() if found is not None else None
