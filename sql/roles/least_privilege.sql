-- Least-privilege roles: each process can do its job and nothing more.
--
-- Not a migration: `receipts migrate` never applies it. Run it with psql as the
-- owner of the tables, after `receipts migrate`, in each receipts database, and
-- again after any release that adds a migration (it is idempotent, and one
-- transaction: a running service never sees it half applied):
--
--   psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -v prefix=receipts -f sql/roles/least_privilege.sql
--
-- `prefix` (default `receipts`; lower-case letters, digits, `_`) names three
-- group roles. Roles are cluster-wide, so two installations on one server
-- take two prefixes, e.g. `shop_receipts` and `blog_receipts`:
--
--   <prefix>_web       gunicorn wsgi:app (Stripe and Resend webhooks, /metrics, /readyz)
--   <prefix>_worker    receipts worker
--   <prefix>_operator  status, show, review, import, backfill, reconcile, doctor, and
--                      the support console (RECEIPTS_CONSOLE_DATABASE_URL)
--
-- A group role that does not exist is created NOLOGIN (that needs CREATEROLE);
-- one that exists, e.g. a login role your platform created, is used as it is.
-- Give each process a login role in its group and its own DATABASE_URL:
--
--   CREATE ROLE receipts_web_app LOGIN PASSWORD '…' IN ROLE receipts_web;
--
-- `receipts migrate` and `receipts prune` keep using the owner role.
--
-- What each role may do, and what the database refuses it
-- (tests/db/test_roles.py tries each refusal):
--
-- <prefix>_web
--   * Stripe ingest: record events, count their redeliveries; create outbox
--     rows, but only new ones as ingest makes them (row-level security on
--     email_outbox): `pending` with what the email is rendered from and a
--     customer_email, or `review` with a reason (and what it would be
--     rendered from); the key must be account/mode/invoice/purpose of the row
--     itself. It cannot write an email (payload), nor any other column
--     (attempts, lease, provider id, sent_at, delivery status) when creating
--     a row, so it cannot queue an email of its own making or create a `sent`
--     or `processing` row.
--   * thin event notifications: store them, count redeliveries, note failed
--     fetches, mark them resolved;
--   * Resend delivery webhooks: store delivery events, and set the delivery
--     status of rows that are `sent` (and only of those, and nothing else);
--   * /metrics: read the outbox's state columns, the attempt log, waiting
--     thin notifications and the reconcile runs;
--   * /readyz: read which migrations are applied.
--   It cannot read the frozen emails, change a row's status, or delete anything.
-- <prefix>_worker
--   * claim and record: update the columns the worker writes (status, lease,
--     attempts, retry time, provider id, sent_at, review reason, last error),
--     on rows that are `pending` or `processing` only, and never mark a row
--     `sent` without a provider id;
--   * the attempt log: add attempts and finish an unfinished one (a finished
--     attempt never changes: sql/006_lookups_and_history.sql).
--   * the email rendered at a row's first claim, once, to the row's
--     customer_email, with only the fields the product writes (from, to,
--     subject, text, html, its own key's tag, reply_to, and the receipt's or
--     refund receipt's PDF as one attachment: receipt-<number>.pdf or
--     refund-<number>.pdf, application/pdf, base64, at
--     most 2 MiB of it).
--   It cannot create or delete outbox rows, change a row's recipient, email,
--   fingerprint or invoice, touch sent or review rows, or read events.
-- <prefix>_operator
--   * read everything;
--   * review decisions (resolve, retry, resend, dismiss), `receipts import`,
--     and the ingest of `receipts backfill` and `receipts reconcile`;
--   * record operator actions and reconcile runs, which it cannot change or
--     delete afterwards;
--   * the support console's failed logins: count them, add one, delete those
--     older than the throttling window.
--   It cannot change a row's recipient, email, fingerprint or invoice, or
--   delete anything.
--
-- Row-level security is enabled on email_outbox: a role other than the owner
-- and these three (a read-only reporting role, say) sees no rows until it is
-- given a policy of its own. The policies named receipts_* on email_outbox
-- belong to this script, which drops and recreates them on each run.

\set ON_ERROR_STOP on
\if :{?prefix}
\else
\set prefix receipts
\endif
\set web :prefix '_web'
\set worker :prefix '_worker'
\set operator :prefix '_operator'

BEGIN;

-- The role names reach the DO blocks below through these settings (psql does
-- not expand its variables inside dollar quotes).
SELECT set_config('receipts.role_prefix', :'prefix', true) AS prefix,
       set_config('receipts.web_role', :'web', true) AS web,
       set_config('receipts.worker_role', :'worker', true) AS worker,
       set_config('receipts.operator_role', :'operator', true) AS operator
\gset applied_

DO $$
DECLARE
    role_name text;
BEGIN
    IF current_setting('receipts.role_prefix') !~ '^[a-z][a-z0-9_]{0,40}$' THEN
        RAISE EXCEPTION 'prefix %: use lower-case letters, digits and _ (at most 41, a letter first)',
            quote_literal(current_setting('receipts.role_prefix'));
    END IF;
    FOREACH role_name IN ARRAY ARRAY[current_setting('receipts.web_role'),
                                    current_setting('receipts.worker_role'),
                                    current_setting('receipts.operator_role')]
    LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = role_name) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', role_name);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;  -- created by a concurrent run of this script
            END;
        END IF;
    END LOOP;
END
$$;

-- Start from nothing, so a rerun also takes back what an older version granted.
REVOKE ALL ON stripe_events, email_outbox, email_attempts, operator_actions, resend_events,
    stripe_thin_events, reconcile_runs, sending_pauses, schema_migrations, console_login_failures,
    refund_claims, readiness_probe, email_batches, send_pace
    FROM :"web", :"worker", :"operator";
REVOKE ALL ON SEQUENCE email_attempts_id_seq, operator_actions_id_seq, reconcile_runs_id_seq,
    console_login_failures_id_seq
    FROM :"web", :"worker", :"operator";

GRANT USAGE ON SCHEMA public TO :"web", :"worker", :"operator";

-- web: Stripe ingest
GRANT SELECT, INSERT ON stripe_events TO :"web";
GRANT UPDATE (deliveries, last_received_at) ON stripe_events TO :"web";
-- (not payload: ingest stores what the email is rendered from, and only the worker
-- renders it, so a web credential cannot queue an email of its own making)
GRANT INSERT (message_key, purpose, account, livemode, invoice_id, source_event_id, fingerprint,
              render_input, status, review_reason, invoice_number, customer_email,
              amount, currency)
    ON email_outbox TO :"web";
GRANT SELECT (message_key, invoice_id, fingerprint, status, review_reason, available_at,
              first_attempt_at, lease_token, locked_until, provider_id, sent_at,
              delivery_status, delivery_status_at, delivery_detail, created_at, resent_as)
    ON email_outbox TO :"web";
-- web: one email per refund (a refund receipt or a credit note claims each refund id
-- with its row; a claim is never changed nor deleted)
GRANT SELECT, INSERT ON refund_claims TO :"web";
-- web: thin event notifications (stored, then resolved once their invoice is fetched)
GRANT SELECT, INSERT ON stripe_thin_events TO :"web";
GRANT UPDATE (deliveries, last_received_at, fetch_attempts, last_error, status, resolved_at)
    ON stripe_thin_events TO :"web";
-- web: Resend delivery webhooks
GRANT SELECT, INSERT ON resend_events TO :"web";
GRANT UPDATE (outcome, message_key) ON resend_events TO :"web";
GRANT UPDATE (delivery_status, delivery_status_at, delivery_detail, updated_at)
    ON email_outbox TO :"web";
-- web: /metrics
GRANT SELECT ON email_attempts, reconcile_runs, sending_pauses TO :"web";
-- web and worker: /readyz and the health checks ask which migrations are applied
GRANT SELECT ON schema_migrations TO :"web", :"worker";
-- web: /readyz proves that a write commits by updating its one probe row
GRANT SELECT, INSERT, UPDATE ON readiness_probe TO :"web";

-- worker: claim and record
GRANT SELECT ON email_outbox TO :"worker";
GRANT UPDATE (status, review_reason, lease_token, locked_until, first_attempt_at, attempts,
              available_at, provider_id, sent_at, last_error, updated_at)
    ON email_outbox TO :"worker";
-- worker: the email rendered at a row's first claim (frozen once: a trigger
-- refuses any change to a stored one)
GRANT UPDATE (payload, render_input) ON email_outbox TO :"worker";
GRANT SELECT ON email_attempts TO :"worker";
GRANT INSERT (message_key, attempt, worker_id, lease_token, finished_at, outcome)
    ON email_attempts TO :"worker";
GRANT UPDATE (finished_at, outcome, http_status, provider_error, provider_message, provider_id)
    ON email_attempts TO :"worker";
GRANT USAGE ON SEQUENCE email_attempts_id_seq TO :"worker";
-- worker: the sending pause after a quota answer, seen by every worker process
GRANT SELECT, INSERT, UPDATE, DELETE ON sending_pauses TO :"worker";
-- worker: a delivery webhook about an email of a receipt the worker never
-- recorded as sent is evidence that the provider accepted it (claim_ready)
GRANT SELECT (message_key, outcome, email_id, received_at) ON resend_events TO :"worker";
-- worker: batches (RECEIPTS_BATCH_SIZE): written before their first attempt, each
-- member row naming its batch and place; finished when their answer is recorded
GRANT SELECT, INSERT ON email_batches TO :"worker";
GRANT UPDATE (attempts, finished_at) ON email_batches TO :"worker";
GRANT UPDATE (batch_key, batch_position) ON email_outbox TO :"worker";
-- worker: the fleet's send pace (the next start time of any worker's request, the
-- provider's stated limit, and the wait a 429 asked every worker to keep)
GRANT SELECT, INSERT, UPDATE ON send_pace TO :"worker";

-- operator: read everything
GRANT SELECT ON stripe_events, email_outbox, email_attempts, operator_actions, resend_events,
    stripe_thin_events, reconcile_runs, sending_pauses, schema_migrations, email_batches,
    send_pace
    TO :"operator";
-- operator: review decisions, import, and the ingest of backfill and reconcile
GRANT INSERT (message_key, purpose, account, livemode, invoice_id, source_event_id, fingerprint,
              payload, render_input, status, review_reason, invoice_number, customer_email,
              amount, currency, provider_id, sent_at)
    ON email_outbox TO :"operator";
GRANT UPDATE (status, review_reason, provider_id, sent_at, attempts, first_attempt_at,
              available_at, lease_token, locked_until, updated_at,
              delivery_status, delivery_status_at, delivery_detail, resent_as)
    ON email_outbox TO :"operator";
GRANT INSERT ON stripe_events TO :"operator";
GRANT SELECT, INSERT ON refund_claims TO :"operator";
GRANT UPDATE (deliveries, last_received_at, source) ON stripe_events TO :"operator";
GRANT UPDATE (deliveries, last_received_at, fetch_attempts, last_error, status, resolved_at)
    ON stripe_thin_events TO :"operator";
GRANT INSERT ON operator_actions, reconcile_runs TO :"operator";
GRANT USAGE ON SEQUENCE operator_actions_id_seq, reconcile_runs_id_seq TO :"operator";
-- operator: the support console's failed logins (its throttle)
GRANT SELECT, INSERT, DELETE ON console_login_failures TO :"operator";
GRANT USAGE ON SEQUENCE console_login_failures_id_seq TO :"operator";
-- `receipts import` stages the file in a temporary table.
GRANT TEMPORARY ON DATABASE :"DBNAME" TO :"operator";

-- Row-level security on the outbox: which rows each role may create or change.
ALTER TABLE email_outbox ENABLE ROW LEVEL SECURITY;

DO $$
DECLARE
    policy_name text;
BEGIN
    FOR policy_name IN
        SELECT policyname FROM pg_policies
         WHERE schemaname = current_schema() AND tablename = 'email_outbox'
           AND policyname LIKE 'receipts\_%'
    LOOP
        EXECUTE format('DROP POLICY %I ON email_outbox', policy_name);
    END LOOP;
END
$$;

CREATE POLICY receipts_web_reads ON email_outbox FOR SELECT TO :"web" USING (true);
-- Only rows as ingest makes them (receipts.ingest.store): the column grants
-- above leave every other column at its default.
CREATE POLICY receipts_web_creates ON email_outbox FOR INSERT TO :"web" WITH CHECK (
    message_key = account || '/' || CASE WHEN livemode THEN 'live' ELSE 'test' END
                  || '/' || invoice_id || '/' || purpose
    AND (
        -- the email is rendered at the first claim, to this customer_email
        (status = 'pending' AND review_reason IS NULL AND payload IS NULL
         AND render_input IS NOT NULL AND customer_email IS NOT NULL)
        -- a paid invoice that cannot become an email: what it would be rendered
        -- from is kept for a resend to a corrected address (receipts review resend --to)
        OR (status = 'review' AND payload IS NULL
            AND review_reason IS NOT NULL AND review_reason <> 'dismissed')));
-- Delivery status: the only column of an existing row the web role may
-- change (column grants), and only on sent rows; any other row is refused.
CREATE POLICY receipts_web_delivery_status ON email_outbox FOR UPDATE TO :"web"
    USING (true) WITH CHECK (status = 'sent');

CREATE POLICY receipts_worker_reads ON email_outbox FOR SELECT TO :"worker" USING (true);
-- Rows on their way (pending, processing) and nothing else: a sent receipt
-- cannot be made pending again, a review row cannot be sent behind a person.
CREATE POLICY receipts_worker_sends ON email_outbox FOR UPDATE TO :"worker"
    USING (status IN ('pending', 'processing'))
    WITH CHECK ((status IN ('pending', 'processing')
                 OR (status = 'sent' AND provider_id IS NOT NULL)
                 OR (status = 'review' AND review_reason IS NOT NULL
                     AND review_reason <> 'dismissed'))
                -- an email rendered at the first claim goes to the row's customer_email
                AND (payload IS NULL OR customer_email IS NULL
                     OR payload -> 'to' = jsonb_build_array(customer_email))
                -- and carries only what the product writes (docs/architecture.md,
                -- "The frozen payload and the fingerprint"): no cc, bcc, headers,
                -- or a tag other than its own key's
                AND (payload IS NULL
                     OR (jsonb_typeof(payload) = 'object'
                         AND NOT EXISTS (
                             SELECT 1 FROM jsonb_object_keys(payload) AS field
                              WHERE field NOT IN ('from', 'to', 'subject', 'text', 'html',
                                                  'tags', 'reply_to', 'attachments'))
                         -- the receipt's PDF (RECEIPTS_ATTACH_PDF): one item, named
                         -- receipt-<number>.pdf (refund-<number>.pdf for a refund
                         -- receipt), of base64 content at most 2 MiB long
                         AND (NOT payload ? 'attachments'
                              OR (jsonb_typeof(payload -> 'attachments') = 'array'
                                  AND jsonb_array_length(payload -> 'attachments') = 1
                                  AND jsonb_typeof(payload -> 'attachments' -> 0) = 'object'
                                  AND (SELECT array_agg(key ORDER BY key) FROM jsonb_object_keys(
                                          payload -> 'attachments' -> 0) AS key)
                                      = ARRAY['content', 'content_type', 'filename']
                                  AND payload -> 'attachments' -> 0 ->> 'filename'
                                      ~ '^(receipt|refund)-[A-Za-z0-9._-]+\.pdf$'
                                  AND payload -> 'attachments' -> 0 ->> 'content_type'
                                      = 'application/pdf'
                                  AND jsonb_typeof(payload -> 'attachments' -> 0 -> 'content')
                                      = 'string'
                                  AND length(payload -> 'attachments' -> 0 ->> 'content')
                                      BETWEEN 4 AND 2097152
                                  AND payload -> 'attachments' -> 0 ->> 'content'
                                      ~ '^[A-Za-z0-9+/]+={0,2}$'))
                         AND payload -> 'tags' = jsonb_build_array(jsonb_build_object(
                             'name', 'message_key', 'value',
                             left(regexp_replace(message_key, '[^A-Za-z0-9_-]', '_', 'g'), 256))))));

CREATE POLICY receipts_operator_decides ON email_outbox FOR ALL TO :"operator"
    USING (true) WITH CHECK (status <> 'processing');

COMMIT;
