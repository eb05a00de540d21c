-- `receipts prune`: what retention may drop, counted or dropped in short batches.
--
-- Only sent receipts are touched; rows pending, processing or in review, and
-- operator actions, never are. A receipt is settled at greatest(sent_at,
-- created_at): written exactly as the email_outbox_settled index defines it
-- (sql/003_retention_indexes.sql), so the planner walks that index.

-- name: database_now
-- The database clock, so every process computes the same cutoffs.
SELECT now() AS now

-- name: count_prunable
-- One row counting what a prune with these cutoffs would drop now; changes nothing.
SELECT
  (SELECT count(*) FROM stripe_events WHERE first_received_at < %(details)s) AS events,
  (SELECT count(*) FROM resend_events
    WHERE received_at < %(details)s AND outcome <> 'unknown_email') AS delivery_events,
  (SELECT count(*) FROM email_attempts WHERE message_key IN (
      SELECT message_key FROM email_outbox
       WHERE status = 'sent' AND greatest(sent_at, created_at) < %(details)s)) AS attempts,
  (SELECT count(*) FROM email_outbox
    WHERE status = 'sent' AND greatest(sent_at, created_at) < %(details)s
      AND greatest(sent_at, created_at) >= %(keys)s AND payload IS NOT NULL) AS payloads,
  (SELECT count(*) FROM email_outbox
    WHERE status = 'sent' AND greatest(sent_at, created_at) < %(keys)s) AS receipts,
  (SELECT count(*) FROM email_batches AS b
    WHERE b.finished_at < %(keys)s
      AND NOT EXISTS (SELECT 1 FROM email_outbox AS o
                       WHERE o.batch_key = b.batch_key
                         AND NOT (o.status = 'sent'
                                  AND greatest(o.sent_at, o.created_at) < %(keys)s))) AS batches

-- name: stripe_events_pages
-- How many 8 kB pages the Stripe event table holds now.
SELECT pg_relation_size('stripe_events') / current_setting('block_size')::int AS pages

-- name: delete_stripe_events_in_pages
-- Stripe events first received before the cutoff, within one range of table pages, are gone.
DELETE FROM stripe_events
WHERE ctid >= %(first_page)s::tid AND ctid < %(end_page)s::tid
  AND first_received_at < %(before)s

-- name: delete_delivery_events_batch
-- At most a batch of delivery events received before the cutoff are gone, except those that matched no receipt.
DELETE FROM resend_events WHERE svix_id IN (
    SELECT svix_id FROM resend_events
    WHERE received_at < %(before)s AND outcome <> 'unknown_email'
    LIMIT %(size)s)

-- name: delete_settled_receipts_batch
-- At most a batch of sent receipts settled before the keys cutoff are gone with their attempts; returns both counts.
WITH doomed AS (
    SELECT message_key FROM email_outbox
    WHERE status = 'sent' AND greatest(sent_at, created_at) < %(before)s
    LIMIT %(size)s FOR UPDATE SKIP LOCKED),
dropped_attempts AS (
    DELETE FROM email_attempts a USING doomed d
    WHERE a.message_key = d.message_key RETURNING 1),
dropped_rows AS (
    DELETE FROM email_outbox o USING doomed d
    WHERE o.message_key = d.message_key AND o.status = 'sent'
    RETURNING 1)
SELECT (SELECT count(*) FROM dropped_rows) AS rows,
       (SELECT count(*) FROM dropped_attempts) AS attempts

-- name: lock_settled_with_details
-- The next batch, after the given position, of sent receipts settled between the cutoffs that still hold an email, locked, in settled order.
SELECT message_key, greatest(sent_at, created_at) AS settled
FROM email_outbox
WHERE status = 'sent' AND greatest(sent_at, created_at) < %(details)s
  AND greatest(sent_at, created_at) >= %(keys)s AND payload IS NOT NULL
  AND (%(after_at)s::timestamptz IS NULL
       OR (greatest(sent_at, created_at), message_key) > (%(after_at)s, %(after_key)s))
ORDER BY greatest(sent_at, created_at), message_key
LIMIT %(size)s
FOR UPDATE

-- name: delete_attempts_of
-- The attempt log of the given receipts is gone.
DELETE FROM email_attempts WHERE message_key = ANY(%(keys)s)

-- name: clear_payloads_of
-- The frozen email of each given receipt that is sent is gone; the row and its key stay.
UPDATE email_outbox SET payload = NULL
WHERE message_key = ANY(%(keys)s) AND status = 'sent' AND payload IS NOT NULL

-- name: delete_finished_batches_batch
-- At most a batch of provider batches finished before the keys cutoff that no receipt names any more are gone (a live batch never is).
DELETE FROM email_batches WHERE batch_key IN (
    SELECT b.batch_key FROM email_batches AS b
    WHERE b.finished_at < %(before)s
      AND NOT EXISTS (SELECT 1 FROM email_outbox AS o WHERE o.batch_key = b.batch_key)
    LIMIT %(size)s)
