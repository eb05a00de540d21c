-- Optional least-privilege roles for the two long-running processes.
--
-- Not a migration: `receipts migrate` never applies it. Run it as the owner
-- of the tables, after `receipts migrate`, in each receipts database; it is
-- idempotent (safe to run again after later migrations):
--
--   psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -f sql/roles/least_privilege.sql
--
-- It creates two group roles (cluster-wide, NOLOGIN) and grants them rights
-- on this database's tables only. Give each process a login role in its group:
--
--   CREATE ROLE receipts_web_app LOGIN PASSWORD '…' IN ROLE receipts_web;
--   CREATE ROLE receipts_worker_app LOGIN PASSWORD '…' IN ROLE receipts_worker;
--
-- receipts_web (gunicorn wsgi:app):
--   * ingest: insert Stripe events and outbox rows, read the columns the
--     duplicate check needs, count redeliveries of an event;
--   * thin event notifications: store them, count their redeliveries, note a
--     failed fetch of their invoice, mark them resolved;
--   * Resend delivery webhooks: store delivery events, set a sent row's
--     delivery_status (and nothing else of the row);
--   * /metrics: read the outbox's state columns, the attempt log, waiting
--     thin notifications and the reconcile runs.
--   It cannot read the frozen emails (payload), change a row's status, or
--   delete anything.
-- receipts_worker (receipts worker): claim and update outbox rows, write
--   the attempt log, record, read and lift the sending pause after a quota
--   answer. It cannot create or delete outbox rows or read events.
-- Operator commands (status, show, review, import), migrate and prune keep
-- using the owner role.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'receipts_web') THEN
        CREATE ROLE receipts_web NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;  -- created by a concurrent run of this script
END
$$;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'receipts_worker') THEN
        CREATE ROLE receipts_worker NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;

-- Start from nothing, so a rerun also takes back what an older version granted.
REVOKE ALL ON stripe_events, email_outbox, email_attempts, operator_actions, resend_events,
    stripe_thin_events, reconcile_runs, sending_pauses, schema_migrations
    FROM receipts_web, receipts_worker;
REVOKE ALL ON SEQUENCE email_attempts_id_seq, operator_actions_id_seq, reconcile_runs_id_seq
    FROM receipts_web, receipts_worker;

GRANT USAGE ON SCHEMA public TO receipts_web, receipts_worker;

-- web: ingest
GRANT SELECT, INSERT ON stripe_events TO receipts_web;
GRANT UPDATE (deliveries, last_received_at) ON stripe_events TO receipts_web;
GRANT INSERT ON email_outbox TO receipts_web;
GRANT SELECT (message_key, invoice_id, fingerprint, status, review_reason, available_at,
              first_attempt_at, lease_token, locked_until, provider_id, sent_at,
              delivery_status, delivery_status_at, delivery_detail)
    ON email_outbox TO receipts_web;
-- web: thin event notifications (stored, then resolved once their invoice is fetched)
GRANT SELECT, INSERT ON stripe_thin_events TO receipts_web;
GRANT UPDATE (deliveries, last_received_at, fetch_attempts, last_error, status, resolved_at)
    ON stripe_thin_events TO receipts_web;
-- web: Resend delivery webhooks
GRANT SELECT, INSERT ON resend_events TO receipts_web;
GRANT UPDATE (outcome, message_key) ON resend_events TO receipts_web;
GRANT UPDATE (delivery_status, delivery_status_at, delivery_detail, updated_at)
    ON email_outbox TO receipts_web;
-- web: /metrics
GRANT SELECT ON email_attempts, reconcile_runs, sending_pauses TO receipts_web;

-- worker
GRANT SELECT, UPDATE ON email_outbox TO receipts_worker;
GRANT SELECT, INSERT, UPDATE ON email_attempts TO receipts_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON sending_pauses TO receipts_worker;
GRANT USAGE ON SEQUENCE email_attempts_id_seq TO receipts_worker;
