"""The email providers, one module each, behind one interface (``base.Provider``).

* ``resend``: Resend's HTTP API; an idempotency key kept 24 h, then its sent list;
* ``postmark``: Postmark's HTTP API; the key as metadata, found by the outbound search;
* ``smtp``: any SMTP relay; a stable Message-ID, ambiguous sends to review;
* ``file_sink``: ``.eml`` files for ``receipts dev``, idempotent by key.

``message`` writes a payload as an RFC 5322 message (SMTP, the sink, ``receipts
preview``). ``receipts.delivery.configured`` picks one from the settings.
"""
