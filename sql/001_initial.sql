-- The verified Stripe events, the outbox of receipts to send, and the log of
-- every attempt to send one.

CREATE TABLE stripe_events (
    event_id          text PRIMARY KEY,
    event_type        text NOT NULL,
    account           text NOT NULL,            -- 'platform' or the Connect account id
    livemode          boolean NOT NULL,
    outcome           text NOT NULL
        CHECK (outcome IN ('queued', 'review', 'duplicate', 'conflict', 'ignored')),
    detail            text,                     -- why ignored / reviewed
    message_key       text,
    fingerprint       text,
    deliveries        integer NOT NULL DEFAULT 1,
    first_received_at timestamptz NOT NULL DEFAULT now(),
    last_received_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX stripe_events_message_key ON stripe_events (message_key)
    WHERE message_key IS NOT NULL;
CREATE INDEX stripe_events_conflicts ON stripe_events (first_received_at)
    WHERE outcome = 'conflict';

CREATE TABLE email_outbox (
    message_key       text PRIMARY KEY CHECK (length(message_key) <= 256),
    purpose           text NOT NULL,
    account           text NOT NULL,
    livemode          boolean NOT NULL,
    invoice_id        text NOT NULL,
    source_event_id   text NOT NULL,
    fingerprint       text NOT NULL,
    payload           jsonb,                    -- the frozen email; NULL when none could be made
    status            text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'processing', 'sent', 'review')),
    review_reason     text,
    attempts          integer NOT NULL DEFAULT 0,
    available_at      timestamptz NOT NULL DEFAULT now(),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    first_attempt_at  timestamptz,
    locked_until      timestamptz,
    lease_token       uuid,
    provider_id       text,
    sent_at           timestamptz,
    last_error        text,
    delivery_status   text,
    delivery_status_at timestamptz,
    CONSTRAINT review_has_reason CHECK (status <> 'review' OR review_reason IS NOT NULL),
    CONSTRAINT sendable_has_payload CHECK (status NOT IN ('pending', 'processing') OR payload IS NOT NULL),
    CONSTRAINT processing_has_lease CHECK (
        status <> 'processing' OR (lease_token IS NOT NULL AND locked_until IS NOT NULL))
);

-- Rows a worker may claim: ready pending rows and processing rows whose lease
-- may have expired. Small however many sent rows pile up.
CREATE INDEX email_outbox_ready ON email_outbox (available_at)
    WHERE status = 'pending';
CREATE INDEX email_outbox_leased ON email_outbox (locked_until)
    WHERE status = 'processing';
CREATE INDEX email_outbox_invoice ON email_outbox (invoice_id);
CREATE INDEX email_outbox_review ON email_outbox (review_reason) WHERE status = 'review';
CREATE INDEX email_outbox_provider_id ON email_outbox (provider_id) WHERE provider_id IS NOT NULL;

CREATE TABLE email_attempts (
    id              bigserial PRIMARY KEY,
    message_key     text NOT NULL REFERENCES email_outbox (message_key),
    attempt         integer NOT NULL,
    worker_id       text NOT NULL,
    lease_token     uuid NOT NULL,
    started_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    http_status     integer,
    provider_error  text,
    provider_id     text,
    outcome         text                        -- NULL while in flight or when the worker died
);

CREATE INDEX email_attempts_message_key ON email_attempts (message_key, started_at);
