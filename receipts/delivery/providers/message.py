"""A frozen payload as an RFC 5322 message: what SMTP sends and the ``.eml`` sink writes.

:func:`build_email` writes the stored JSON (``from``, ``to``, ``subject``,
``text``, ``html``, ``reply_to``) as headers and a text + HTML body, and the
receipt's PDF (``attachments``, ``RECEIPTS_ATTACH_PDF``) as a MIME attachment
around them (multipart/mixed), with:

* ``Message-ID`` derived from the message key (:func:`message_id`),
  ``<sha256(key)[:32]@domain of the sender>``: the same on every attempt, so
  a receiving system that sees one receipt twice can tell, and it is the id
  the outbox stores for an SMTP send;
* ``Date`` in UTC written ``+0000`` (RFC 5322 §3.3: ``-0000`` would say the
  local time zone is unknown);
* ``Auto-Submitted: auto-generated`` (RFC 3834): a receipt is sent by a
  program, so vacation responders and list servers leave it alone.

* ``Content-Language`` (RFC 3282): the language the HTML part declares in
  its ``<html lang>``, which the templates write from the receipt's locale.
"""

from __future__ import annotations

import base64
import binascii
import email.policy
import email.utils
import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from typing import Any

from receipts.addresses import AddressError, parse_mailbox
from receipts.delivery.answers import json_object

# The one attachment a payload may carry (sql/roles/least_privilege.sql says the same).
from receipts.receipt.pdf import FILENAME

MESSAGE_KEY_HEADER = "X-Receipts-Message-Key"
# Where a sender has no usable domain (it never has: EMAIL_FROM is checked).
FALLBACK_DOMAIN = "receipts.invalid"
# The language tag of the HTML part's root element (BCP 47 letters, digits, hyphens).
_HTML_LANG = re.compile(
    r"<html[^>]*?\slang=\"([A-Za-z]{2,8}(?:-[A-Za-z0-9]{1,8})*)\"", re.IGNORECASE
)


def message_id(message_key: str, email_from: str) -> str:
    """``<sha256(key)[:32]@domain of email_from>``, the same for every attempt of a key."""
    digest = hashlib.sha256(message_key.encode("utf-8")).hexdigest()[:32]
    return f"<{digest}@{sender_domain(email_from)}>"


def sender_domain(email_from: str) -> str:
    try:
        address = parse_mailbox(email_from).addr_spec
    except AddressError:
        return FALLBACK_DOMAIN
    domain = address.rpartition("@")[2].strip().lower()
    return domain or FALLBACK_DOMAIN


def build_email(
    message_key: str,
    payload: bytes,
    *,
    date: datetime | None = None,
    extra_headers: dict[str, str] | None = None,
) -> EmailMessage:
    """The stored payload as an RFC 5322 message; ValueError if unusable.

    Addresses are parsed by ``receipts.addresses`` and written as header
    objects, never joined as text: one stored recipient is one written
    recipient, or the message is refused (AddressError is a ValueError).
    """
    document = json_object(payload)
    recipients = document.get("to")
    if (
        not isinstance(recipients, list)
        or not recipients
        or not all(isinstance(to, str) for to in recipients)
    ):
        raise ValueError("payload has no 'to' list")
    sender = str(document.get("from", ""))
    message = EmailMessage(policy=email.policy.SMTP)
    message["From"] = parse_mailbox(sender)
    message["To"] = tuple(parse_mailbox(to) for to in recipients)
    if document.get("reply_to"):
        message["Reply-To"] = parse_mailbox(str(document["reply_to"]))
    message["Subject"] = str(document.get("subject", ""))
    message["Date"] = email.utils.format_datetime(date or datetime.now(UTC))
    message["Message-ID"] = message_id(message_key, sender)
    message["Auto-Submitted"] = "auto-generated"
    message[MESSAGE_KEY_HEADER] = message_key
    for name, value in (extra_headers or {}).items():
        message[name] = value
    message.set_content(str(document.get("text", "")))
    if document.get("html"):
        message.add_alternative(str(document["html"]), subtype="html")
    for attached in attachments(document):
        # multipart/mixed around the text + HTML alternative
        message.add_attachment(
            attached.content, maintype="application", subtype="pdf", filename=attached.filename
        )
    # After the body: set_content clears every Content-* header it finds.
    language = content_language(str(document.get("html") or ""))
    if language:
        message["Content-Language"] = language
    return message


@dataclass(frozen=True)
class Attachment:
    filename: str
    content: bytes


def attachments(document: dict[str, Any]) -> list[Attachment]:
    """The payload's PDF attachment (``RECEIPTS_ATTACH_PDF``), decoded; ValueError if it is
    not one PDF named ``receipt-….pdf`` in base64."""
    found = document.get("attachments")
    if found is None:
        return []
    if not isinstance(found, list) or len(found) != 1 or not isinstance(found[0], dict):
        raise ValueError("payload attachments are not one item")
    item = found[0]
    filename = item.get("filename")
    if not isinstance(filename, str) or not FILENAME.fullmatch(filename):
        raise ValueError("payload attachment is not named receipt-….pdf")
    if item.get("content_type") != "application/pdf" or not isinstance(item.get("content"), str):
        raise ValueError("payload attachment is not a PDF")
    try:
        content = base64.b64decode(item["content"], validate=True)
    except binascii.Error:
        raise ValueError("payload attachment is not base64") from None
    return [Attachment(filename=filename, content=content)]


def content_language(html: str) -> str | None:
    """``de-DE`` for ``<html lang="de_DE">`` or ``<html lang="de-DE">``; None without one."""
    found = _HTML_LANG.search(html[:2000].replace("_", "-"))
    return found.group(1) if found else None


def envelope(message: EmailMessage) -> tuple[str, list[str]]:
    """The SMTP envelope of a built message: the sender and every recipient address."""
    sender = message["From"].addresses[0].addr_spec
    recipients = [address.addr_spec for address in message["To"].addresses]
    return sender, recipients
