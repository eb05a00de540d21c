-- The web role's statements (receipts_web): Stripe ingest (receipts.ingest.store)
-- and the workers' wake-up (receipts.ingest.wakeup); docs/architecture.md has
-- the data flow. None updates or deletes an outbox row.

-- name: ingest_event
-- Atomic: one row per key, one event per id; no row back while a concurrent insert is unseen.
WITH new_row AS (
    INSERT INTO email_outbox (message_key, purpose, account, livemode, invoice_id,
                              source_event_id, fingerprint, payload, status, review_reason)
    VALUES (%(key)s, %(purpose)s, %(account)s, %(livemode)s, %(invoice_id)s, %(event_id)s,
            %(fingerprint)s, %(payload)s, %(status)s, %(review_reason)s)
    ON CONFLICT (message_key) DO NOTHING
    RETURNING 1
), existing AS (
    SELECT fingerprint FROM email_outbox
     WHERE message_key = %(key)s AND NOT EXISTS (SELECT FROM new_row)
), decided AS (
    SELECT CASE WHEN EXISTS (SELECT FROM new_row) THEN %(new_outcome)s::text
                WHEN (SELECT fingerprint FROM existing) = %(fingerprint)s THEN 'duplicate'
                -- imported from an earlier sender (`receipts import`): sent already
                WHEN starts_with((SELECT fingerprint FROM existing), %(imported_prefix)s)
                    THEN 'duplicate'
                WHEN EXISTS (SELECT FROM existing) THEN 'conflict'
           END AS outcome
)
INSERT INTO stripe_events (event_id, event_type, account, livemode, outcome, detail,
                           message_key, fingerprint)
SELECT %(event_id)s, %(event_type)s, %(account)s, %(livemode)s, outcome, %(detail)s,
       %(key)s, %(fingerprint)s
  FROM decided
 WHERE outcome IS NOT NULL
ON CONFLICT (event_id) DO UPDATE
   SET deliveries = stripe_events.deliveries + 1,
       last_received_at = now()
RETURNING outcome, detail, message_key, (xmax = 0) AS first_delivery

-- name: insert_outbox_row
-- One row per message key: a second insert of the same key does nothing and returns no row.
INSERT INTO email_outbox (message_key, purpose, account, livemode, invoice_id, source_event_id,
                          fingerprint, payload, status, review_reason)
VALUES (%(key)s, %(purpose)s, %(account)s, %(livemode)s, %(invoice_id)s, %(event_id)s,
        %(fingerprint)s, %(payload)s, %(status)s, %(review_reason)s)
ON CONFLICT (message_key) DO NOTHING
RETURNING status

-- name: outbox_fingerprint
-- The stored fingerprint of a key (duplicate or conflict?); reads nothing else of the row.
SELECT fingerprint FROM email_outbox WHERE message_key = %(key)s

-- name: record_stripe_event
-- One row per event id: a redelivery counts one more delivery and keeps the first outcome.
INSERT INTO stripe_events (event_id, event_type, account, livemode, outcome, detail,
                           message_key, fingerprint)
VALUES (%(event_id)s, %(event_type)s, %(account)s, %(livemode)s, %(outcome)s, %(detail)s,
        %(key)s, %(fingerprint)s)
ON CONFLICT (event_id) DO UPDATE
   SET deliveries = stripe_events.deliveries + 1,
       last_received_at = now()
RETURNING outcome, detail, message_key, (xmax = 0) AS first_delivery

-- name: notify_workers
-- Wakes listening workers; run after the ingest commit, never inside it (serialized commits).
SELECT pg_notify(%(channel)s, '')
