-- The schema as the numbered migrations leave it, in one file: the map to
-- read. It is not applied by `receipts migrate` (the migrations are);
-- tests/db/test_schema_file.py builds a database from this file and one from
-- the migrations and compares their catalogs, so a migration that is not
-- written here too fails that test. Column order is the migrations' order.
-- docs/architecture.md explains what each state means and who moves it.

-- Bookkeeping of `receipts migrate`: one row per applied migration file.
CREATE TABLE schema_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- Every verified Stripe event, once per event id, with what it meant.
CREATE TABLE stripe_events (
    event_id          text PRIMARY KEY,
    event_type        text NOT NULL,
    account           text NOT NULL,            -- 'platform' or the Connect account id
    livemode          boolean NOT NULL,
    outcome           text NOT NULL
        CHECK (outcome IN ('queued', 'review', 'duplicate', 'conflict', 'ignored')),
    detail            text,                     -- why ignored or reviewed
    message_key       text,                     -- the receipt it concerns, if any
    fingerprint       text,                     -- this event's fingerprint (a conflict keeps it)
    deliveries        integer NOT NULL DEFAULT 1,
    first_received_at timestamptz NOT NULL DEFAULT now(),
    last_received_at  timestamptz NOT NULL DEFAULT now(),
    source            text NOT NULL DEFAULT 'webhook',
    -- what support looks an event up by when it made no receipt
    invoice_id        text,
    invoice_number    text,
    customer_email    text,
    CONSTRAINT stripe_events_source CHECK (source IN ('webhook', 'backfill', 'reconcile'))
);

CREATE INDEX stripe_events_message_key ON stripe_events (message_key)
    WHERE message_key IS NOT NULL;
CREATE INDEX stripe_events_conflicts ON stripe_events (first_received_at)
    WHERE outcome = 'conflict';
CREATE INDEX stripe_events_rowless_invoice ON stripe_events (invoice_id)
    WHERE message_key IS NULL AND invoice_id IS NOT NULL;
CREATE INDEX stripe_events_rowless_number ON stripe_events (upper(invoice_number))
    WHERE message_key IS NULL AND invoice_number IS NOT NULL;
CREATE INDEX stripe_events_rowless_email ON stripe_events (lower(customer_email))
    WHERE message_key IS NULL AND customer_email IS NOT NULL;

-- Batches of receipts sent in one provider request under the batch's own
-- Idempotency-Key (RECEIPTS_BATCH_SIZE): membership and order are on the member
-- rows (batch_key, batch_position), written before the first attempt; a batch is
-- live until its answer is recorded (finished_at).
CREATE TABLE email_batches (
    batch_key        text PRIMARY KEY CHECK (length(batch_key) <= 256),
    provider         text NOT NULL,
    size             integer NOT NULL CHECK (size >= 1),
    body_sha256      text NOT NULL,
    attempts         integer NOT NULL DEFAULT 1,
    worker_id        text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    first_attempt_at timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
);

CREATE INDEX email_batches_live ON email_batches (created_at) WHERE finished_at IS NULL;

-- The outbox: one row per email ever to be sent, keyed by its message key.
CREATE TABLE email_outbox (
    message_key        text PRIMARY KEY CHECK (length(message_key) <= 256),
    purpose            text NOT NULL,
    account            text NOT NULL,
    livemode           boolean NOT NULL,
    invoice_id         text NOT NULL,
    source_event_id    text NOT NULL,
    fingerprint        text NOT NULL,
    payload            jsonb,                   -- the frozen email, from the first claim on
    status             text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'processing', 'sent', 'review')),
    review_reason      text,
    attempts           integer NOT NULL DEFAULT 0,
    available_at       timestamptz NOT NULL DEFAULT now(),
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    first_attempt_at   timestamptz,             -- set by the first claim, never reset by a crash
    locked_until       timestamptz,             -- the lease of a processing row
    lease_token        uuid,
    provider_id        text,
    sent_at            timestamptz,
    last_error         text,
    delivery_status    text,                    -- what the provider's delivery webhooks said
    delivery_status_at timestamptz,
    -- what support looks a receipt up by
    invoice_number     text,
    customer_email     text,
    amount             bigint,
    currency           text,
    delivery_detail    text,
    render_input       json,                    -- what the first claim renders the email from
    -- the resend (`<key>/resend-N`) that settled this receipt: a review row with
    -- one needs no person; NULL when none, and again after `review retry`
    resent_as          text,
    -- the batch this row was last sent in (migration 017) and its place there
    batch_key          text REFERENCES email_batches (batch_key),
    batch_position     integer,
    CONSTRAINT review_has_reason CHECK (status <> 'review' OR review_reason IS NOT NULL),
    CONSTRAINT processing_has_lease CHECK (
        status <> 'processing' OR (lease_token IS NOT NULL AND locked_until IS NOT NULL)),
    CONSTRAINT email_outbox_delivery_status_check CHECK (
        delivery_status IS NULL OR delivery_status IN
            ('delayed', 'delivered', 'bounced', 'suppressed', 'failed', 'complained')),
    CONSTRAINT unsent_row_has_email CHECK (
        status NOT IN ('pending', 'processing') OR payload IS NOT NULL
        OR render_input IS NOT NULL),
    -- a resend key names the receipt it copies: `<key, or the key it resends>/resend-N`
    CONSTRAINT email_outbox_batch_position CHECK (
        (batch_key IS NULL) = (batch_position IS NULL) AND coalesce(batch_position, 0) >= 0),
    CONSTRAINT email_outbox_resent_as_names_a_resend CHECK (
        resent_as IS NULL
        OR (resent_as ~ '/resend-[0-9]+$'
            AND starts_with(resent_as,
                            regexp_replace(message_key, '/resend-[0-9]+$', '') || '/resend-')))
);

-- Rows a worker may claim: ready pending rows and processing rows whose lease
-- may have expired. Small however many sent rows pile up.
CREATE INDEX email_outbox_batch ON email_outbox (batch_key, batch_position)
    WHERE batch_key IS NOT NULL;
CREATE INDEX email_outbox_ready ON email_outbox (available_at) WHERE status = 'pending';
CREATE INDEX email_outbox_leased ON email_outbox (locked_until) WHERE status = 'processing';
CREATE INDEX email_outbox_invoice ON email_outbox (invoice_id);
CREATE INDEX email_outbox_review ON email_outbox (review_reason) WHERE status = 'review';
CREATE INDEX email_outbox_sent_at ON email_outbox (sent_at) WHERE status = 'sent';
CREATE INDEX email_outbox_provider_id ON email_outbox (provider_id) WHERE provider_id IS NOT NULL;
CREATE INDEX email_outbox_settled ON email_outbox (greatest(sent_at, created_at), message_key)
    WHERE status = 'sent';
CREATE INDEX email_outbox_invoice_number ON email_outbox (upper(invoice_number))
    WHERE invoice_number IS NOT NULL;
CREATE INDEX email_outbox_customer_email ON email_outbox (lower(customer_email))
    WHERE customer_email IS NOT NULL;

-- Once frozen, an email never changes: every send of a key carries the same
-- bytes. Clearing it (receipts prune, on sent rows) stays possible.
CREATE FUNCTION email_outbox_payload_frozen() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.payload IS NOT NULL AND NEW.payload IS NOT NULL
       AND NEW.payload IS DISTINCT FROM OLD.payload THEN
        RAISE EXCEPTION 'the frozen email of % cannot change', OLD.message_key
              USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER email_outbox_payload_frozen
    BEFORE UPDATE OF payload ON email_outbox
    FOR EACH ROW EXECUTE FUNCTION email_outbox_payload_frozen();

-- Every attempt to send, written by the claim before the network call.
CREATE TABLE email_attempts (
    id                bigserial PRIMARY KEY,
    message_key       text NOT NULL REFERENCES email_outbox (message_key),
    attempt           integer NOT NULL,
    worker_id         text NOT NULL,
    lease_token       uuid NOT NULL,
    started_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    http_status       integer,
    provider_error    text,
    provider_id       text,
    outcome           text,                     -- NULL while in flight, or when the worker died
    provider_message  text,
    CONSTRAINT email_attempts_outcome_check CHECK (outcome IS NULL OR outcome IN (
        'sent', 'retry', 'review', 'lease_lost', 'config_error', 'released',
        'skipped_cutoff', 'skipped_budget', 'rate_limited', 'quota_exceeded'))
);

CREATE INDEX email_attempts_message_key ON email_attempts (message_key, started_at);
CREATE INDEX email_attempts_started_at ON email_attempts (started_at);
CREATE INDEX email_attempts_unfinished ON email_attempts (started_at)
    WHERE outcome IS NULL AND finished_at IS NULL;
CREATE INDEX email_attempts_provider_id ON email_attempts (provider_id)
    WHERE provider_id IS NOT NULL;

-- An attempt is history: once finished it never changes, and no attempt
-- changes whose it is.
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
    WHEN (OLD.finished_at IS NOT NULL OR OLD.outcome IS NOT NULL
          OR NEW.id IS DISTINCT FROM OLD.id
          OR NEW.message_key IS DISTINCT FROM OLD.message_key
          OR NEW.attempt IS DISTINCT FROM OLD.attempt
          OR NEW.worker_id IS DISTINCT FROM OLD.worker_id
          OR NEW.lease_token IS DISTINCT FROM OLD.lease_token
          OR NEW.started_at IS DISTINCT FROM OLD.started_at)
    EXECUTE FUNCTION email_attempts_refuse_rewrite();

-- Every decision a person takes about a receipt: who, when, why. No foreign
-- key: the trail must outlive the rows it talks about.
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

-- Resend's delivery webhooks, one row per svix-id so a redelivery changes nothing.
CREATE TABLE resend_events (
    svix_id           text PRIMARY KEY,
    event_type        text NOT NULL,
    email_id          text,                     -- Resend's id of the email (our provider_id)
    message_key       text,                     -- the outbox row it matched, if any
    message_tag       text,                     -- the email's message_key tag
    outcome           text NOT NULL
        CHECK (outcome IN ('applied', 'stale', 'evidence', 'unknown_email', 'ignored')),
    occurred_at       timestamptz,              -- the event's own created_at
    received_at       timestamptz NOT NULL DEFAULT now(),
    detail            text,
    email_created_at  timestamptz
);

CREATE INDEX resend_events_message_key ON resend_events (message_key)
    WHERE message_key IS NOT NULL;
CREATE INDEX resend_events_received_at ON resend_events (received_at);
CREATE INDEX resend_events_unknown_tag ON resend_events (message_tag)
    WHERE outcome = 'unknown_email';
CREATE INDEX resend_events_email_id ON resend_events (email_id) WHERE email_id IS NOT NULL;
CREATE INDEX resend_events_evidence ON resend_events (message_key) WHERE outcome = 'evidence';

-- A quota pause every worker sees, one per provider.
CREATE TABLE sending_pauses (
    provider      text PRIMARY KEY,
    reason        text NOT NULL
        CHECK (reason IN ('daily_quota_exceeded', 'monthly_quota_exceeded')),
    paused_at     timestamptz NOT NULL DEFAULT now(),
    paused_until  timestamptz NOT NULL,
    worker_id     text NOT NULL,
    CONSTRAINT pause_ends_after_it_starts CHECK (paused_until > paused_at)
);

-- The fleet's send pace, one row per provider: when the next request of any
-- worker may start, and the provider's own limit (requests/s) as last heard.
CREATE TABLE send_pace (
    provider    text PRIMARY KEY,
    next_slot   timestamptz NOT NULL,
    team_limit  double precision CHECK (team_limit > 0),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Thin event notifications, stored before their invoice is fetched.
CREATE TABLE stripe_thin_events (
    event_id           text PRIMARY KEY,
    event_type         text NOT NULL,
    account            text NOT NULL,
    livemode           boolean NOT NULL,
    related_object_id  text NOT NULL,
    notification       jsonb NOT NULL,
    status             text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'resolved')),
    fetch_attempts     integer NOT NULL DEFAULT 0,
    last_error         text,
    deliveries         integer NOT NULL DEFAULT 1,
    first_received_at  timestamptz NOT NULL DEFAULT now(),
    last_received_at   timestamptz NOT NULL DEFAULT now(),
    resolved_at        timestamptz,
    CONSTRAINT resolved_has_time CHECK (status <> 'resolved' OR resolved_at IS NOT NULL)
);

CREATE INDEX stripe_thin_events_pending ON stripe_thin_events (first_received_at)
    WHERE status = 'pending';
CREATE INDEX stripe_thin_events_resolved ON stripe_thin_events (resolved_at)
    WHERE status = 'resolved';

-- One row per `receipts reconcile` run, for `receipts status`.
CREATE TABLE reconcile_runs (
    id             bigserial PRIMARY KEY,
    started_at     timestamptz NOT NULL,
    finished_at    timestamptz NOT NULL DEFAULT now(),
    window_start   timestamptz NOT NULL,
    accounts       text[] NOT NULL,
    apply          boolean NOT NULL,
    paid_invoices  integer NOT NULL,
    missing        integer NOT NULL,
    applied        integer NOT NULL,
    result         text NOT NULL CHECK (result IN ('clean', 'missing', 'applied', 'failed')),
    error          text
);

CREATE INDEX reconcile_runs_finished_at ON reconcile_runs (finished_at);

-- Failed logins to the support console, counted by every web process alike;
-- rows older than the throttling window are deleted as new failures come in.
CREATE TABLE console_login_failures (
    id         bigserial PRIMARY KEY,
    user_name  text NOT NULL CHECK (length(user_name) <= 64),  -- as typed, known or not
    address    text NOT NULL CHECK (length(address) <= 64),    -- the client's IP address
    failed_at  timestamptz NOT NULL
);

CREATE INDEX console_login_failures_user ON console_login_failures (user_name, failed_at);
CREATE INDEX console_login_failures_address ON console_login_failures (address, failed_at);
CREATE INDEX console_login_failures_failed_at ON console_login_failures (failed_at);

-- The console's status chart counts, per day, the receipts that
-- went to review at ingest and those Resend did not deliver: both small sets.
CREATE INDEX stripe_events_review ON stripe_events (first_received_at) WHERE outcome = 'review';
CREATE INDEX email_outbox_not_delivered ON email_outbox (delivery_status_at)
    WHERE delivery_status IN ('bounced', 'suppressed', 'failed');

-- One email per refund: the refund receipt or the credit note that carries it
-- claims the refund id with its outbox row; the first to commit owns it.
CREATE TABLE refund_claims (
    refund_id   text PRIMARY KEY,
    message_key text NOT NULL,
    claimed_at  timestamptz DEFAULT now()
);

-- `receipts status` counts the refund and credit-note events recorded without
-- an email because no STRIPE_API_KEY was set.
CREATE INDEX stripe_events_needs_api_key ON stripe_events (last_received_at)
    WHERE detail = 'needs_stripe_api_key';

-- /readyz proves that a write can commit: it upserts this one row, at most
-- once every few seconds per web process.
CREATE TABLE readiness_probe (
    id         boolean PRIMARY KEY DEFAULT true CHECK (id),
    checked_at timestamptz NOT NULL
);
