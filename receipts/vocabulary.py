"""The words the product writes into its tables and says to the world, each defined once.

The values are the strings stored in PostgreSQL (and checked there by CHECK
constraints), so a ``StrEnum`` member compares equal to the column's text and
can be passed to psycopg as it is. ``docs/architecture.md`` explains what
each state means and who moves a row from one to the next.
"""

from __future__ import annotations

from enum import StrEnum

NOTIFY_CHANNEL = "receipts_outbox"
# Fingerprint prefix of rows `receipts import` recorded as sent by an earlier
# sender: any later event for such a key is a duplicate, never a conflict.
IMPORTED_FINGERPRINT_PREFIX = "imported:"


class RowStatus(StrEnum):
    """``email_outbox.status``."""

    PENDING = "pending"
    PROCESSING = "processing"
    SENT = "sent"
    REVIEW = "review"


class AttemptOutcome(StrEnum):
    """``email_attempts.outcome``; NULL (None) while in flight, or when the worker died."""

    SENT = "sent"
    RETRY = "retry"
    REVIEW = "review"
    LEASE_LOST = "lease_lost"
    CONFIG_ERROR = "config_error"
    RELEASED = "released"
    SKIPPED_CUTOFF = "skipped_cutoff"
    SKIPPED_BUDGET = "skipped_budget"
    # The provider refused for now, not because of the message: attempt refunded.
    RATE_LIMITED = "rate_limited"
    QUOTA_EXCEEDED = "quota_exceeded"


# Outcomes written when no request reached the provider.
NOT_SENT_OUTCOMES = frozenset(
    {AttemptOutcome.RELEASED, AttemptOutcome.SKIPPED_CUTOFF, AttemptOutcome.SKIPPED_BUDGET}
)


class IngestOutcome(StrEnum):
    """``stripe_events.outcome``: what one Stripe event became."""

    QUEUED = "queued"
    REVIEW = "review"
    DUPLICATE = "duplicate"
    CONFLICT = "conflict"
    IGNORED = "ignored"


class ReviewReason(StrEnum):
    """``email_outbox.review_reason`` values the product itself writes.

    The provider's error name (``invalid_to_address``…) is stored as the
    reason when the provider refuses a message, so the column is open text.
    """

    # written at ingest: a paid invoice that cannot become an email
    MISSING_CUSTOMER_EMAIL = "missing_customer_email"
    INVALID_CUSTOMER_EMAIL = "invalid_customer_email"
    INVALID_HOSTED_INVOICE_URL = "invalid_hosted_invoice_url"
    INVALID_AMOUNT_PAID = "invalid_amount_paid"
    INVALID_CURRENCY = "invalid_currency"
    INVALID_INVOICE_AMOUNTS = "invalid_invoice_amounts"
    # written by the worker, before or after a send
    RENDER_FAILED = "render_failed"  # the templates raised on this receipt at its first claim
    # a copy for the books whose address is not the worker's RECEIPTS_COPY_TO
    COPY_ADDRESS_NOT_CONFIGURED = "copy_address_not_configured"
    # its rows would not add up to Stripe's total or amount paid (the numbers in last_error)
    RECEIPT_DOES_NOT_ADD_UP = "receipt_does_not_add_up"
    RETRY_WINDOW_ELAPSED = "retry_window_elapsed"
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    PROVIDER_REJECTED = "provider_rejected"
    # written by a person closing a review row without sending
    DISMISSED = "dismissed"


# Review reasons a corrected address fixes: `receipts review resend KEY --to ADDRESS`.
ADDRESS_REVIEW_REASONS = (
    ReviewReason.MISSING_CUSTOMER_EMAIL,
    ReviewReason.INVALID_CUSTOMER_EMAIL,
)


class DeliveryStatus(StrEnum):
    """``email_outbox.delivery_status``, set by the provider's delivery webhooks.

    A status only ever moves to one of higher :attr:`rank`: a late
    ``delivered`` never hides a ``bounced`` that arrived first. ``bounced``,
    ``suppressed`` and ``failed`` mean the customer got nothing
    (:data:`NOT_DELIVERED`); ``complained`` comes after a delivery.
    """

    DELAYED = "delayed"
    DELIVERED = "delivered"
    BOUNCED = "bounced"
    SUPPRESSED = "suppressed"
    FAILED = "failed"
    COMPLAINED = "complained"

    @property
    def rank(self) -> int:
        return _DELIVERY_RANK[self]


_DELIVERY_RANK = {
    DeliveryStatus.DELAYED: 1,
    DeliveryStatus.DELIVERED: 2,
    DeliveryStatus.BOUNCED: 3,
    DeliveryStatus.SUPPRESSED: 4,
    DeliveryStatus.FAILED: 5,
    DeliveryStatus.COMPLAINED: 6,
}

# Sent receipts the customer never got: the provider bounced, suppressed or failed them.
NOT_DELIVERED = (DeliveryStatus.BOUNCED, DeliveryStatus.SUPPRESSED, DeliveryStatus.FAILED)


class DeliveryEventOutcome(StrEnum):
    """``resend_events.outcome``: what one stored delivery event did.

    ``evidence``: the event is about an email id no receipt recorded, and its
    ``message_key`` tag names a receipt: the provider accepted a send of that
    receipt which the worker never recorded (``receipts review`` offers it).
    """

    APPLIED = "applied"
    STALE = "stale"
    EVIDENCE = "evidence"
    UNKNOWN_EMAIL = "unknown_email"
    IGNORED = "ignored"


class PauseReason(StrEnum):
    """``sending_pauses.reason``: why no worker sends until ``paused_until``."""

    DAILY_QUOTA = "daily_quota_exceeded"
    MONTHLY_QUOTA = "monthly_quota_exceeded"
