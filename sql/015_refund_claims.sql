-- One email per refund (docs/architecture.md, "Refunds and credit notes").
--
-- A refund can be told by its own refund receipt (purpose refund-re_…) or by
-- the credit note that carries it (credit-note-cn_…): two message keys. Each
-- email claims the refund ids it tells about in the same transaction as its
-- outbox row; the primary key lets only the first to commit own a refund, and
-- the other event is recorded without a row of its own.
CREATE TABLE refund_claims (
    refund_id   text PRIMARY KEY,
    message_key text NOT NULL,
    claimed_at  timestamptz DEFAULT now()
);

-- `receipts status` counts the refund and credit-note events recorded without
-- an email because no STRIPE_API_KEY was set.
CREATE INDEX stripe_events_needs_api_key ON stripe_events (last_received_at)
    WHERE detail = 'needs_stripe_api_key';
