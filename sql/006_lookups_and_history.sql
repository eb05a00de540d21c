-- What support has in hand, on the rows it looks up; the provider's own words
-- on each attempt; and an attempt log nobody can rewrite.

-- The invoice as support knows it: its number (ACME-0102), the customer's
-- address as Stripe gave it (also a malformed one, which is why a receipt went
-- to review), and the amount. Set by ingest from the event; NULL on rows
-- recorded before this migration and on imported ones. Adding nullable
-- columns without a default changes no row, so this takes no time.
ALTER TABLE email_outbox
    ADD COLUMN invoice_number text,
    ADD COLUMN customer_email text,
    ADD COLUMN amount bigint,
    ADD COLUMN currency text;

-- The same facts on each event: an event that made no receipt (a zero-value
-- invoice is ignored) is still found by its invoice id, number or address.
ALTER TABLE stripe_events
    ADD COLUMN invoice_id text,
    ADD COLUMN invoice_number text,
    ADD COLUMN customer_email text;

-- `receipts show ACME-0102` and `receipts show jenny@example.com`. Every
-- existing row has NULL here, so the builds read the tables once and write
-- almost nothing: this whole migration took 1.9 s with a million rows in each
-- of email_outbox, stripe_events and email_attempts (2 shared cores, warm
-- cache), during which ingest and claims wait on its locks.
CREATE INDEX email_outbox_invoice_number ON email_outbox (upper(invoice_number))
    WHERE invoice_number IS NOT NULL;
CREATE INDEX email_outbox_customer_email ON email_outbox (lower(customer_email))
    WHERE customer_email IS NOT NULL;
-- Events that made no row are the only ones looked up here (a receipt's own
-- events are found through its message key), so these stay small.
CREATE INDEX stripe_events_rowless_invoice ON stripe_events (invoice_id)
    WHERE message_key IS NULL AND invoice_id IS NOT NULL;
CREATE INDEX stripe_events_rowless_number ON stripe_events (upper(invoice_number))
    WHERE message_key IS NULL AND invoice_number IS NOT NULL;
CREATE INDEX stripe_events_rowless_email ON stripe_events (lower(customer_email))
    WHERE message_key IS NULL AND customer_email IS NOT NULL;
-- `receipts show <Resend email id>`: an attempt the row never recorded as sent,
-- and delivery events (whose email id may name no row).
CREATE INDEX email_attempts_provider_id ON email_attempts (provider_id)
    WHERE provider_id IS NOT NULL;
CREATE INDEX resend_events_email_id ON resend_events (email_id)
    WHERE email_id IS NOT NULL;

-- The provider's error message (Resend's `message`: "The `to` field must be a
-- valid email address…"), at most 300 characters, next to its machine name.
ALTER TABLE email_attempts ADD COLUMN provider_message text;

-- The attempt log is history: a finished attempt never changes again, and no
-- attempt changes whose receipt, number, worker, lease or start time it is.
-- Finishing an attempt in flight (the worker recording the provider's answer)
-- is the one update there is. Deleting old attempts stays with `receipts prune`
-- (sql/roles/least_privilege.sql gives no other role DELETE). The WHEN clause
-- keeps the trigger out of the worker's normal path: the function runs only
-- for an update that breaks the rule, and refuses it.
CREATE FUNCTION email_attempts_refuse_rewrite() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'email_attempts is append-only: attempt % of % is finished or its identity would change',
        OLD.attempt, OLD.message_key
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER email_attempts_append_only
    BEFORE UPDATE ON email_attempts
    FOR EACH ROW
    WHEN (OLD.finished_at IS NOT NULL
          OR OLD.outcome IS NOT NULL
          OR NEW.id IS DISTINCT FROM OLD.id
          OR NEW.message_key IS DISTINCT FROM OLD.message_key
          OR NEW.attempt IS DISTINCT FROM OLD.attempt
          OR NEW.worker_id IS DISTINCT FROM OLD.worker_id
          OR NEW.lease_token IS DISTINCT FROM OLD.lease_token
          OR NEW.started_at IS DISTINCT FROM OLD.started_at)
    EXECUTE FUNCTION email_attempts_refuse_rewrite();
