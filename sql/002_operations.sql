-- What operators and the provider's delivery webhooks leave behind.

-- Every decision a person takes about a receipt (review resolve/retry/resend/
-- dismiss, import): who, when, why. No foreign key: the trail must outlive
-- the rows it talks about.
CREATE TABLE operator_actions (
    id            bigserial PRIMARY KEY,
    message_key   text NOT NULL,
    action        text NOT NULL,
    performed_by  text NOT NULL,
    reason        text NOT NULL,
    performed_at  timestamptz NOT NULL DEFAULT now(),
    details       jsonb NOT NULL DEFAULT '{}'::jsonb
);

CREATE INDEX operator_actions_message_key ON operator_actions (message_key, performed_at);

-- Resend's delivery webhooks (signed with Svix), one row per svix-id so a
-- redelivered event is recognised and changes nothing.
CREATE TABLE resend_events (
    svix_id       text PRIMARY KEY,
    event_type    text NOT NULL,
    email_id      text,                       -- Resend's id of the email (our provider_id)
    message_key   text,                       -- the outbox row it matched, if any
    message_tag   text,                       -- the email's message_key tag (sanitized key)
    outcome       text NOT NULL
        CHECK (outcome IN ('applied', 'stale', 'unknown_email', 'ignored')),
    occurred_at   timestamptz,                -- the event's own created_at
    received_at   timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX resend_events_message_key ON resend_events (message_key)
    WHERE message_key IS NOT NULL;
CREATE INDEX resend_events_received_at ON resend_events (received_at);
-- An event for an email id no row has is still evidence of a send: its tag
-- names the receipt (e.g. the worker died before recording the provider id).
CREATE INDEX resend_events_unknown_tag ON resend_events (message_tag)
    WHERE outcome = 'unknown_email';

-- Recent attempts for status and metrics (latency, provider answers, leases
-- recovered), and recently sent rows, without scanning whole tables.
CREATE INDEX email_attempts_started_at ON email_attempts (started_at);
-- Attempts still in flight or abandoned (worker died): few, looked up often.
CREATE INDEX email_attempts_unfinished ON email_attempts (started_at)
    WHERE outcome IS NULL AND finished_at IS NULL;
CREATE INDEX email_outbox_sent_at ON email_outbox (sent_at) WHERE status = 'sent';
