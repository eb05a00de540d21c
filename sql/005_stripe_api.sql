-- Stripe's side of the promise: thin event notifications kept until their
-- invoice has been fetched, where each recorded event came from, and what
-- each `receipts reconcile` run found.

-- How an event reached us: Stripe's push (snapshot or thin notification), or
-- our own catch-up through the API (`receipts backfill`, `receipts reconcile`).
ALTER TABLE stripe_events ADD COLUMN source text NOT NULL DEFAULT 'webhook';
-- Every existing row takes the default, so there is nothing to validate; NOT
-- VALID spares a scan of the table while ingest waits for this lock.
ALTER TABLE stripe_events ADD CONSTRAINT stripe_events_source
    CHECK (source IN ('webhook', 'backfill', 'reconcile')) NOT VALID;

-- A verified thin notification (`"object": "v2.core.event"`) names an invoice
-- but carries none of it. It is stored here before anything else happens, so
-- it cannot be lost while Stripe's API is unreachable; it is `resolved` once
-- the invoice was fetched and ingested (or found not to need a receipt), and
-- its stripe_events row (same event_id) then says what it became.
CREATE TABLE stripe_thin_events (
    event_id          text PRIMARY KEY,
    event_type        text NOT NULL,
    account           text NOT NULL,            -- 'platform' or the Connect account of its context
    livemode          boolean NOT NULL,
    related_object_id text NOT NULL,            -- the invoice id
    notification      jsonb NOT NULL,           -- the verified body as Stripe sent it
    status            text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'resolved')),
    fetch_attempts    integer NOT NULL DEFAULT 0,
    last_error        text,                     -- why the last fetch failed, while pending
    deliveries        integer NOT NULL DEFAULT 1,
    first_received_at timestamptz NOT NULL DEFAULT now(),
    last_received_at  timestamptz NOT NULL DEFAULT now(),
    resolved_at       timestamptz,
    CONSTRAINT resolved_has_time CHECK (status <> 'resolved' OR resolved_at IS NOT NULL)
);

-- What `receipts backfill` and `receipts status` look for: few, read often.
CREATE INDEX stripe_thin_events_pending ON stripe_thin_events (first_received_at)
    WHERE status = 'pending';
-- What `receipts prune` walks.
CREATE INDEX stripe_thin_events_resolved ON stripe_thin_events (resolved_at)
    WHERE status = 'resolved';

-- One row per `receipts reconcile` run: `receipts status` and /metrics report
-- the last one, so a day without a run, or a run that found paid invoices
-- without a receipt, is seen.
CREATE TABLE reconcile_runs (
    id            bigserial PRIMARY KEY,
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz NOT NULL DEFAULT now(),
    window_start  timestamptz NOT NULL,         -- invoices created since then were checked
    accounts      text[] NOT NULL,              -- 'platform' and the Connect accounts checked
    apply         boolean NOT NULL,             -- whether missing receipts were to be ingested
    paid_invoices integer NOT NULL,
    missing       integer NOT NULL,             -- paid invoices found without a receipt row
    applied       integer NOT NULL,             -- of those, ingested by this run
    result        text NOT NULL
        CHECK (result IN ('clean', 'missing', 'applied', 'failed')),
    error         text                          -- why a failed run stopped
);

CREATE INDEX reconcile_runs_finished_at ON reconcile_runs (finished_at);
