-- Resend's whole contract: a sending pause every worker process sees (a daily
-- or monthly quota), attempts the provider refused for now without it being
-- the message's fault, the delivery statuses `failed` and `suppressed` with
-- the reason Resend gives, and delivery events that are evidence of a send
-- the worker never recorded. docs/architecture.md, "What each provider answer
-- does", "Attempt outcomes" and "Delivery statuses", says what each word means.

-- Attempt outcomes: receipts.vocabulary.AttemptOutcome, plus `rate_limited`
-- and `quota_exceeded` (a 429: not sent, attempt refunded). The list only
-- grows, so every existing row meets it; the scan is as short as in 004.
ALTER TABLE email_attempts DROP CONSTRAINT email_attempts_outcome_check;
ALTER TABLE email_attempts
    ADD CONSTRAINT email_attempts_outcome_check CHECK (
        outcome IS NULL
        OR outcome IN ('sent', 'retry', 'review', 'lease_lost', 'config_error', 'released',
                       'skipped_cutoff', 'skipped_budget', 'rate_limited', 'quota_exceeded'));

-- Delivery statuses: receipts.vocabulary.DeliveryStatus. There was no CHECK
-- before; the code has only ever written the first four words. NOT VALID:
-- every row written from now on is checked, and the outbox (kept for months)
-- is not scanned while ingest and the worker wait for the table lock.
ALTER TABLE email_outbox
    ADD CONSTRAINT email_outbox_delivery_status_check CHECK (
        delivery_status IS NULL
        OR delivery_status IN ('delayed', 'delivered', 'bounced', 'suppressed', 'failed',
                               'complained')) NOT VALID;
-- Why the customer did not get it, as Resend says (`failed.reason`,
-- `suppressed.reason`, `bounce.type`/`subType`): short machine words, never
-- the free-text message.
ALTER TABLE email_outbox ADD COLUMN delivery_detail text;

-- Delivery event outcomes: receipts.vocabulary.DeliveryEventOutcome, plus
-- `evidence` (an event about an email id no receipt recorded, whose tag names
-- a receipt). The list only grows; resend_events is pruned, the scan is short.
ALTER TABLE resend_events DROP CONSTRAINT resend_events_outcome_check;
ALTER TABLE resend_events
    ADD CONSTRAINT resend_events_outcome_check CHECK (
        outcome IN ('applied', 'stale', 'evidence', 'unknown_email', 'ignored'));
ALTER TABLE resend_events
    ADD COLUMN detail text,                 -- the reason Resend gave (failed, suppressed, bounced)
    ADD COLUMN email_created_at timestamptz; -- data.created_at: when Resend accepted the email
-- `receipts review` looks up the evidence of the receipts it lists.
CREATE INDEX resend_events_evidence ON resend_events (message_key)
    WHERE outcome = 'evidence';

-- A pause of all sending through one provider until the quota it named
-- resets, recorded by the worker that got the quota answer so that every
-- worker process (cron runs, --loop workers on other machines) stops too.
-- One row per provider; an expired row means nothing and is overwritten.
CREATE TABLE sending_pauses (
    provider      text PRIMARY KEY,        -- receipts.delivery.providers: 'resend'
    reason        text NOT NULL
        CHECK (reason IN ('daily_quota_exceeded', 'monthly_quota_exceeded')),
    paused_at     timestamptz NOT NULL DEFAULT now(),
    paused_until  timestamptz NOT NULL,
    worker_id     text NOT NULL,           -- who recorded it
    CONSTRAINT pause_ends_after_it_starts CHECK (paused_until > paused_at)
);
