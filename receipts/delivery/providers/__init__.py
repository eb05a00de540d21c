"""The email providers, one module each, behind one interface (``base.Provider``).

* ``resend``: Resend's HTTP API; an idempotency key kept 24 h, then its sent list;
* ``postmark``: Postmark's HTTP API; the key as metadata, found by the outbound search;
* ``smtp``: any SMTP relay; a stable Message-ID, ambiguous sends to review;
* ``file_sink``: ``.eml`` files for ``receipts dev``, idempotent by key.

``message`` writes a payload as an RFC 5322 message (SMTP, the sink, ``receipts
preview``). ``receipts.delivery.configured`` picks one from the settings.
"""

from receipts.delivery.providers.base import Guarantee, Lookup, Protection, Provider
from receipts.delivery.providers.file_sink import (
    PAYLOAD_DIGEST_HEADER,
    FileSinkProvider,
    file_sink_id,
)
from receipts.delivery.providers.message import build_email, message_id
from receipts.delivery.providers.postmark import PostmarkProvider
from receipts.delivery.providers.resend import RESEND_DEFAULT_RATE, ResendProvider
from receipts.delivery.providers.smtp import SmtpProvider

__all__ = [
    "PAYLOAD_DIGEST_HEADER",
    "RESEND_DEFAULT_RATE",
    "FileSinkProvider",
    "Guarantee",
    "Lookup",
    "PostmarkProvider",
    "Protection",
    "Provider",
    "ResendProvider",
    "SmtpProvider",
    "build_email",
    "file_sink_id",
    "message_id",
]
