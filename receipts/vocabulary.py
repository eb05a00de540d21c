"""The names the product writes into its tables and says to the world."""

from __future__ import annotations

NOTIFY_CHANNEL = "receipts_outbox"
# Fingerprint prefix of rows `receipts import` recorded as sent by an earlier
# sender: any later event for such a key is a duplicate, never a conflict.
IMPORTED_FINGERPRINT_PREFIX = "imported:"
