-- Statements of Stripe's side: thin notifications (web role), backfill and
-- reconcile (operator commands), and their part of `receipts status` and /metrics.

-- name: record_thin_event
-- One row per thin notification: a redelivery only counts itself and says whether it was resolved.
INSERT INTO stripe_thin_events (event_id, event_type, account, livemode, related_object_id,
                                notification)
VALUES (%(event_id)s, %(event_type)s, %(account)s, %(livemode)s, %(related_object_id)s,
        %(notification)s)
ON CONFLICT (event_id) DO UPDATE
   SET deliveries = stripe_thin_events.deliveries + 1,
       last_received_at = now()
RETURNING status, (xmax = 0) AS first_delivery

-- name: hold_event_for_lookups
-- A snapshot event whose look-ups ran past its request's budget, kept beside the thin notifications for the sweep; a redelivery only counts itself. Says whether the sweep resolved it and what the event became if it is recorded.
WITH held AS (
    INSERT INTO stripe_thin_events (event_id, event_type, account, livemode, related_object_id,
                                    notification, last_error)
    VALUES (%(event_id)s, %(event_type)s, %(account)s, %(livemode)s, %(related_object_id)s,
            %(notification)s, %(error)s)
    ON CONFLICT (event_id) DO UPDATE
       SET deliveries = stripe_thin_events.deliveries + 1,
           last_received_at = now()
    RETURNING status
)
SELECT held.status, recorded.outcome, recorded.detail, recorded.message_key
  FROM held
  LEFT JOIN stripe_events recorded ON recorded.event_id = %(event_id)s

-- name: recorded_event
-- What an already recorded event became: its first outcome, key and reason.
SELECT outcome, detail, message_key FROM stripe_events WHERE event_id = %(event_id)s

-- name: note_thin_fetch_failed
-- Counts a failed fetch of a still pending notification and keeps why; a resolved one is untouched.
UPDATE stripe_thin_events
   SET fetch_attempts = fetch_attempts + 1, last_error = %(error)s
 WHERE event_id = %(event_id)s AND status = 'pending'

-- name: resolve_thin_event
-- Marks a pending notification resolved, in the transaction that recorded its event; once only.
UPDATE stripe_thin_events
   SET status = 'resolved', resolved_at = now(), fetch_attempts = fetch_attempts + 1,
       last_error = NULL
 WHERE event_id = %(event_id)s AND status = 'pending'

-- name: pending_thin_events
-- Pending notifications older than the given age, oldest first, after a keyset position.
SELECT event_id, notification, first_received_at
  FROM stripe_thin_events
 WHERE status = 'pending'
   AND first_received_at < now() - make_interval(secs => %(min_age_seconds)s)
   AND (first_received_at, event_id) > (%(after_time)s, %(after_id)s)
 ORDER BY first_received_at, event_id
 LIMIT %(limit)s

-- name: mark_event_source
-- Says an event row was first recorded by a catch-up command, not by Stripe's push.
UPDATE stripe_events SET source = %(source)s WHERE event_id = %(event_id)s

-- name: recorded_events
-- Which of these event ids are recorded already, and what each became.
SELECT event_id, outcome, message_key FROM stripe_events WHERE event_id = ANY(%(event_ids)s)

-- name: existing_receipts
-- Which of these message keys have a receipt row, whatever its status.
SELECT message_key FROM email_outbox WHERE message_key = ANY(%(keys)s)

-- name: record_reconcile_run
-- One row per reconcile run, written when it ends (also when it fails).
INSERT INTO reconcile_runs (started_at, window_start, accounts, apply, paid_invoices, missing,
                            applied, result, error)
VALUES (%(started_at)s, %(window_start)s, %(accounts)s, %(apply)s, %(paid_invoices)s,
        %(missing)s, %(applied)s, %(result)s, %(error)s)

-- name: last_reconcile_run
-- The most recent reconcile run and how long ago it finished, if there was one.
SELECT finished_at, window_start, accounts, apply, paid_invoices, missing, applied, result, error,
       extract(epoch FROM now() - finished_at)::float8 AS age_seconds
  FROM reconcile_runs
 ORDER BY finished_at DESC
 LIMIT 1

-- name: thin_events_waiting
-- How many notifications still wait for their invoice, the oldest one's wait and its last error.
SELECT count(*) AS pending,
       extract(epoch FROM now() - min(first_received_at))::float8 AS oldest_age_seconds,
       (SELECT last_error FROM stripe_thin_events
         WHERE status = 'pending' ORDER BY first_received_at LIMIT 1) AS oldest_error
  FROM stripe_thin_events
 WHERE status = 'pending'

-- name: events_waiting_for_api_key
-- Refund and credit-note events recorded without an email because no STRIPE_API_KEY was set: in 30 days, in 24 h.
SELECT count(*) AS month,
       count(*) FILTER (WHERE last_received_at > now() - interval '24 hours') AS day
  FROM stripe_events
 WHERE detail = 'needs_stripe_api_key' AND last_received_at > now() - interval '30 days'

-- name: metrics_statement_timeout
-- A scrape never waits long on a busy database.
SET LOCAL statement_timeout = 3000

-- name: wake_workers
-- Wakes `receipts worker --loop` processes after a command queued receipts.
SELECT pg_notify(%(channel)s, '')
