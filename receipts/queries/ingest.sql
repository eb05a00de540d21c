-- The web role's statements (receipts_web): Stripe ingest (receipts.ingest.store),
-- the workers' wake-up (receipts.ingest.wakeup) and Resend delivery events
-- (receipts.ingest.delivery_events); docs/architecture.md has the data flow.
-- None changes an outbox row's status or payload: set_delivery_status is the
-- only statement here that updates an outbox row, and none deletes one.

-- name: ingest_event
-- Atomic: one row per key (and its copy for the books), one event per id; no row back while a concurrent insert is unseen.
WITH new_row AS (
    INSERT INTO email_outbox (message_key, purpose, account, livemode, invoice_id,
                              source_event_id, fingerprint, render_input, status,
                              review_reason, invoice_number, customer_email, amount, currency)
    VALUES (%(key)s, %(purpose)s, %(account)s, %(livemode)s, %(invoice_id)s, %(event_id)s,
            %(fingerprint)s, %(render_input)s, %(status)s, %(review_reason)s,
            %(invoice_number)s, %(customer_email)s, %(amount)s, %(currency)s)
    ON CONFLICT (message_key) DO NOTHING
    RETURNING 1
), books_copy AS (
    -- the copy for the books (RECEIPTS_COPY_TO) follows a new customer row, and only a new one
    INSERT INTO email_outbox (message_key, purpose, account, livemode, invoice_id,
                              source_event_id, fingerprint, render_input, status,
                              invoice_number, customer_email, amount, currency)
    SELECT %(copy_key)s, %(copy_purpose)s, %(account)s, %(livemode)s, %(invoice_id)s,
           %(event_id)s, %(copy_fingerprint)s, %(copy_render_input)s, 'pending',
           %(invoice_number)s, %(copy_to)s, %(amount)s, %(currency)s
     WHERE %(copy_key)s::text IS NOT NULL AND EXISTS (SELECT FROM new_row)
    ON CONFLICT (message_key) DO NOTHING
), existing AS (
    SELECT fingerprint FROM email_outbox
     WHERE message_key = %(key)s AND NOT EXISTS (SELECT FROM new_row)
), decided AS (
    SELECT CASE WHEN EXISTS (SELECT FROM new_row) THEN %(new_outcome)s::text
                -- the same receipt, or one an earlier release fingerprinted (links included)
                WHEN (SELECT fingerprint FROM existing) IN (%(fingerprint)s, %(legacy_fingerprint)s)
                    THEN 'duplicate'
                -- imported from an earlier sender (`receipts import`): sent already
                WHEN starts_with((SELECT fingerprint FROM existing), %(imported_prefix)s)
                    THEN 'duplicate'
                WHEN EXISTS (SELECT FROM existing) THEN 'conflict'
           END AS outcome
)
INSERT INTO stripe_events (event_id, event_type, account, livemode, outcome, detail,
                           message_key, fingerprint, invoice_id, invoice_number, customer_email)
SELECT %(event_id)s, %(event_type)s, %(account)s, %(livemode)s, outcome, %(detail)s,
       %(key)s, %(fingerprint)s, %(invoice_id)s, %(invoice_number)s, %(customer_email)s
  FROM decided
 WHERE outcome IS NOT NULL
ON CONFLICT (event_id) DO UPDATE
   SET deliveries = stripe_events.deliveries + 1,
       last_received_at = now()
RETURNING outcome, detail, message_key, (xmax = 0) AS first_delivery

-- name: insert_outbox_row
-- One row per message key: a second insert of the same key does nothing and returns no row.
INSERT INTO email_outbox (message_key, purpose, account, livemode, invoice_id, source_event_id,
                          fingerprint, render_input, status, review_reason,
                          invoice_number, customer_email, amount, currency)
VALUES (%(key)s, %(purpose)s, %(account)s, %(livemode)s, %(invoice_id)s, %(event_id)s,
        %(fingerprint)s, %(render_input)s, %(status)s, %(review_reason)s,
        %(invoice_number)s, %(customer_email)s, %(amount)s, %(currency)s)
ON CONFLICT (message_key) DO NOTHING
RETURNING status

-- name: outbox_fingerprint
-- The stored fingerprint of a key (duplicate or conflict?); reads nothing else of the row.
SELECT fingerprint FROM email_outbox WHERE message_key = %(key)s

-- name: record_stripe_event
-- One row per event id: a redelivery counts one more delivery and keeps the first outcome.
INSERT INTO stripe_events (event_id, event_type, account, livemode, outcome, detail,
                           message_key, fingerprint, invoice_id, invoice_number, customer_email)
VALUES (%(event_id)s, %(event_type)s, %(account)s, %(livemode)s, %(outcome)s, %(detail)s,
        %(key)s, %(fingerprint)s, %(invoice_id)s, %(invoice_number)s, %(customer_email)s)
ON CONFLICT (event_id) DO UPDATE
   SET deliveries = stripe_events.deliveries + 1,
       last_received_at = now()
RETURNING outcome, detail, message_key, (xmax = 0) AS first_delivery

-- name: notify_workers
-- Wakes listening workers; run after the ingest commit, never inside it (serialized commits).
SELECT pg_notify(%(channel)s, '')

-- name: insert_resend_event
-- One row per svix id: returns no row for a redelivered event, which then changes nothing.
INSERT INTO resend_events
    (svix_id, event_type, email_id, message_tag, outcome, occurred_at, detail, email_created_at)
VALUES (%(svix_id)s, %(event_type)s, %(email_id)s, %(message_tag)s, %(outcome)s, %(occurred_at)s,
        %(detail)s, %(email_created_at)s)
ON CONFLICT (svix_id) DO NOTHING
RETURNING svix_id

-- name: set_delivery_status
-- Only a sent row, only to a higher rank (or the same, later), with the reason the event gives; ranks are DeliveryStatus.rank.
UPDATE email_outbox
   SET delivery_status = %(status)s,
       delivery_status_at = coalesce(%(occurred_at)s, now()),
       delivery_detail = %(detail)s,
       updated_at = now()
 WHERE provider_id = %(email_id)s
   AND status = 'sent'
   AND (coalesce((%(ranks)s::jsonb ->> delivery_status)::int, 0) < %(rank)s
        OR (coalesce((%(ranks)s::jsonb ->> delivery_status)::int, 0) = %(rank)s
            AND delivery_status_at < coalesce(%(occurred_at)s, now())))
RETURNING message_key

-- name: outbox_key_for_email_id
-- The message key of the row the provider knows by this email id, if any; reads nothing else.
SELECT message_key FROM email_outbox WHERE provider_id = %(email_id)s LIMIT 1

-- name: record_resend_outcome
-- Records what one stored delivery event did and which row it matched; touches only that event.
UPDATE resend_events SET outcome = %(outcome)s, message_key = %(key)s WHERE svix_id = %(svix_id)s

-- name: receipts_for_tag
-- The receipts of the invoice whose message key gives this Resend tag (characters Resend refuses as _, as receipts.message_keys.provider_tag); reads keys only.
SELECT message_key FROM email_outbox
WHERE invoice_id = %(invoice_id)s
  AND left(regexp_replace(message_key, '[^A-Za-z0-9_-]', '_', 'g'), 256) = %(tag)s
LIMIT 2

-- name: claim_refunds
-- Claims each refund id for this email's key; the ids some other key claimed first are left as they are.
INSERT INTO refund_claims (refund_id, message_key)
SELECT refund_id, %(key)s FROM unnest(%(refund_ids)s::text[]) AS refund_id ORDER BY refund_id
ON CONFLICT (refund_id) DO NOTHING

-- name: refund_claim_owners
-- Which key owns each of these refund ids (after claim_refunds: this key or the first to commit).
SELECT refund_id, message_key FROM refund_claims WHERE refund_id = ANY(%(refund_ids)s::text[])
