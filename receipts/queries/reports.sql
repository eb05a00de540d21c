-- What an operator reads: the health summary (`receipts status`, /metrics) and
-- the incident timeline of one receipt (`receipts show`). Nothing here writes.
--
-- Row statuses are written out rather than passed in: the partial indexes
-- (sql/001_initial.sql) are defined with the same words, and the planner uses
-- such an index only when the statement itself states its predicate. Values
-- that only the code defines (attempt outcomes, delivery statuses, review
-- reasons) come in as parameters from receipts.vocabulary.

-- name: read_only_snapshot
-- The rest of the transaction reads one consistent state of every table and cannot write.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY

-- name: no_jit
-- No JIT in this transaction: compiling the summary's short index scans costs more than running them.
SET LOCAL jit = off

-- name: limit_scrape_time
-- A /metrics scrape gives up after 3 s rather than hold a connection while the database is slow.
SET LOCAL statement_timeout = 3000

-- name: count_rows_by_status
-- One count per row status that has rows; a status with none is absent.
SELECT status, count(*) AS n FROM email_outbox GROUP BY status

-- name: count_review_rows_by_reason
-- One count per review reason of rows in review, dismissed ones included, and apart from them per reason the rows a resend settled (resent), ordered by reason.
SELECT review_reason, resent_as IS NOT NULL AS resent, count(*) AS n
FROM email_outbox
WHERE status = 'review'
GROUP BY review_reason, resent_as IS NOT NULL
ORDER BY review_reason, resent

-- name: oldest_ready_pending_age
-- Seconds the oldest ready pending row has waited; NULL when no pending row is ready.
SELECT extract(epoch FROM now() - min(available_at))::float8 AS oldest_pending
FROM email_outbox
WHERE status = 'pending' AND available_at <= now()

-- name: closest_to_retry_cutoff
-- The unfinished row retried longest and the seconds left before its retry cutoff; no row when none is retried.
SELECT message_key,
       extract(epoch FROM first_attempt_at + make_interval(secs => %(cutoff_seconds)s) - now())::float8
           AS remaining
FROM (
    -- One branch per status so each reads only its partial index.
    (SELECT message_key, first_attempt_at FROM email_outbox
      WHERE status = 'pending' AND first_attempt_at IS NOT NULL
      ORDER BY first_attempt_at LIMIT 1)
    UNION ALL
    (SELECT message_key, first_attempt_at FROM email_outbox
      WHERE status = 'processing' AND first_attempt_at IS NOT NULL
      ORDER BY first_attempt_at LIMIT 1)
) AS retried
ORDER BY first_attempt_at
LIMIT 1

-- name: recent_activity
-- One row of counts: lease recoveries, abandoned attempts, conflicts, unknown delivery events and evidence of unrecorded sends (24 h), sends (1 h, 24 h).
SELECT
  -- A recovery is an attempt whose previous attempt on the same row never
  -- finished: its worker died and another claimed the row after the lease.
  (SELECT count(*) FROM email_attempts a
    WHERE a.outcome IS NULL AND a.finished_at IS NULL
      AND a.started_at > now() - interval '48 hours'
      AND (SELECT b.started_at FROM email_attempts b
            WHERE b.message_key = a.message_key AND b.id > a.id
            ORDER BY b.id LIMIT 1) > now() - interval '24 hours') AS lease_recoveries,
  -- An abandoned attempt never finished and nobody has claimed its row since.
  (SELECT count(*) FROM email_attempts a JOIN email_outbox o USING (message_key)
    WHERE a.outcome IS NULL AND a.finished_at IS NULL
      AND NOT EXISTS (SELECT 1 FROM email_attempts b
                       WHERE b.message_key = a.message_key AND b.id > a.id)
      AND NOT (o.status = 'processing' AND o.lease_token = a.lease_token
               AND o.locked_until > now())) AS abandoned,
  (SELECT count(*) FROM stripe_events
    WHERE outcome = 'conflict' AND first_received_at > now() - interval '24 hours') AS conflicts,
  (SELECT count(*) FROM resend_events
    WHERE outcome = 'unknown_email' AND received_at > now() - interval '24 hours')
      AS unknown_deliveries,
  (SELECT count(*) FROM resend_events
    WHERE outcome = 'evidence' AND received_at > now() - interval '24 hours')
      AS evidence_deliveries,
  (SELECT count(*) FROM email_outbox
    WHERE status = 'sent' AND sent_at > now() - interval '1 hour') AS sent_hour,
  (SELECT count(*) FROM email_outbox
    WHERE status = 'sent' AND sent_at > now() - interval '24 hours') AS sent_day

-- name: recent_delivery_problems
-- Each receipt once whose delivery event applied in the last 24 h left it in one of the given delivery statuses, with Resend's reason.
SELECT DISTINCT ON (e.message_key) e.message_key, o.delivery_status, o.delivery_status_at,
       o.delivery_detail
FROM resend_events e JOIN email_outbox o USING (message_key)
WHERE e.received_at > now() - interval '24 hours' AND e.outcome = 'applied'
  AND o.delivery_status = ANY(%(problem_statuses)s)
ORDER BY e.message_key

-- name: active_sending_pauses
-- Every sending pause still in force (a quota answer), with the seconds it has left.
SELECT provider, reason, paused_at, paused_until, worker_id,
       extract(epoch FROM paused_until - now())::float8 AS seconds_left
FROM sending_pauses
WHERE paused_until > now()
ORDER BY provider

-- name: provider_failing_since
-- The run of failed sends (given outcome) since the provider last answered as working (other given outcomes), 24 h back at most; no row unless it holds at least the given count and its newest is within the window.
WITH recent AS (
    SELECT started_at, outcome FROM email_attempts
    WHERE started_at > now() - interval '24 hours'
      AND outcome = ANY(%(answered)s)
), last_working AS (
    SELECT max(started_at) AS at FROM recent WHERE outcome <> %(failed)s
)
SELECT min(started_at) AS since, max(started_at) AS latest, count(*) AS failures
FROM recent
WHERE outcome = %(failed)s
  AND started_at > coalesce((SELECT at FROM last_working), '-infinity'::timestamptz)
HAVING count(*) >= %(min_failures)s
   AND max(started_at) > now() - make_interval(secs => %(window_seconds)s)

-- name: provider_answers_by_class
-- Provider calls finished within the window, counted by answer class: 2xx, 4xx, 5xx, timeout.
SELECT CASE WHEN http_status IS NULL THEN 'timeout'
            WHEN http_status BETWEEN 200 AND 299 THEN '2xx'
            WHEN http_status BETWEEN 400 AND 499 THEN '4xx'
            WHEN http_status >= 500 THEN '5xx' END AS answer,
       count(*) AS n
FROM email_attempts
WHERE finished_at > now() - make_interval(secs => %(window_seconds)s)
  -- Through the started_at index: a call lasts seconds, far less than this.
  AND started_at > now() - make_interval(secs => %(started_within_seconds)s)
  -- A real request to the provider: it answered, or timed out and will be retried.
  AND (http_status IS NOT NULL OR outcome = %(retry)s)
GROUP BY 1

-- name: provider_latency
-- Count, total seconds and the given quantiles of the duration of provider calls finished within the window.
SELECT count(*) AS n,
       coalesce(sum(extract(epoch FROM finished_at - started_at)), 0)::float8 AS total,
       percentile_cont(%(quantiles)s::float8[]) WITHIN GROUP
           (ORDER BY extract(epoch FROM finished_at - started_at)) AS quantiles
FROM email_attempts
WHERE finished_at > now() - make_interval(secs => %(window_seconds)s)
  AND started_at > now() - make_interval(secs => %(started_within_seconds)s)
  AND (http_status IS NOT NULL OR outcome = %(retry)s)

-- name: keys_of_message_key
-- The message key itself when a receipt has it; no row otherwise.
SELECT message_key FROM email_outbox WHERE message_key = %(key)s

-- name: keys_of_invoice
-- Every receipt of one invoice id (Connect accounts, modes, resends), oldest first.
SELECT message_key FROM email_outbox
WHERE invoice_id = %(invoice_id)s
ORDER BY created_at, message_key

-- name: keys_of_invoice_number
-- Every receipt whose invoice has this number, in any letter case, oldest first.
SELECT message_key FROM email_outbox
WHERE upper(invoice_number) = upper(%(number)s) AND invoice_number IS NOT NULL
ORDER BY created_at, message_key

-- name: keys_of_customer_email
-- Every receipt to this address (any letter case), newest first.
SELECT message_key FROM email_outbox
WHERE lower(customer_email) = lower(%(email)s) AND customer_email IS NOT NULL
ORDER BY created_at DESC, message_key

-- name: keys_of_provider_id
-- The receipts the provider knows by this email id: recorded as sent with it, an attempt that got it, or a delivery event matched to it.
SELECT message_key FROM email_outbox WHERE provider_id = %(provider_id)s
UNION
SELECT message_key FROM email_attempts WHERE provider_id = %(provider_id)s
UNION
SELECT message_key FROM resend_events
 WHERE email_id = %(provider_id)s AND message_key IS NOT NULL

-- name: tags_of_provider_id
-- The receipt tags of delivery events for this email id that matched no receipt.
SELECT DISTINCT message_tag FROM resend_events
WHERE email_id = %(provider_id)s AND message_key IS NULL AND message_tag IS NOT NULL

-- name: stripe_event
-- One recorded Stripe event: what it was about and what it became.
SELECT event_id, event_type, account, livemode, outcome, detail, message_key, invoice_id,
       invoice_number, customer_email, deliveries, first_received_at, last_received_at, source
FROM stripe_events
WHERE event_id = %(event_id)s

-- name: thin_event
-- One stored thin notification: the invoice it names and whether it was fetched yet.
SELECT event_id, event_type, account, livemode, related_object_id, status, fetch_attempts,
       last_error, deliveries, first_received_at, resolved_at
FROM stripe_thin_events
WHERE event_id = %(event_id)s

-- name: rowless_events_of_invoice
-- Events about this invoice id that made no receipt (ignored ones), oldest first.
SELECT event_id, event_type, account, livemode, outcome, detail, message_key, invoice_id,
       invoice_number, customer_email, deliveries, first_received_at, last_received_at, source
FROM stripe_events
WHERE message_key IS NULL AND invoice_id = %(invoice_id)s AND invoice_id IS NOT NULL
ORDER BY first_received_at, event_id

-- name: rowless_events_of_invoice_number
-- Events about an invoice with this number (any letter case) that made no receipt, oldest first.
SELECT event_id, event_type, account, livemode, outcome, detail, message_key, invoice_id,
       invoice_number, customer_email, deliveries, first_received_at, last_received_at, source
FROM stripe_events
WHERE message_key IS NULL AND upper(invoice_number) = upper(%(number)s)
  AND invoice_number IS NOT NULL
ORDER BY first_received_at, event_id

-- name: rowless_events_of_customer_email
-- Events for this address (any letter case) that made no receipt, newest first.
SELECT event_id, event_type, account, livemode, outcome, detail, message_key, invoice_id,
       invoice_number, customer_email, deliveries, first_received_at, last_received_at, source
FROM stripe_events
WHERE message_key IS NULL AND lower(customer_email) = lower(%(email)s)
  AND customer_email IS NOT NULL
ORDER BY first_received_at DESC, event_id

-- name: timeline_row
-- One receipt's row without its frozen email (of the payload, only the recipients), with how far the resend that settled it got.
SELECT o.message_key, o.purpose, o.account, o.livemode, o.invoice_id, o.source_event_id,
       o.status, o.review_reason, o.attempts, o.available_at, o.created_at, o.updated_at,
       o.first_attempt_at, o.locked_until, o.lease_token, o.provider_id, o.sent_at,
       o.last_error, o.delivery_status, o.delivery_status_at, o.delivery_detail,
       o.invoice_number, o.customer_email, o.amount, o.currency, o.fingerprint,
       o.payload -> 'to' AS recipients, o.render_input IS NOT NULL AS has_render_input,
       o.resent_as, r.status AS resend_status, r.sent_at AS resend_sent_at,
       r.provider_id AS resend_provider_id, r.review_reason AS resend_review_reason
FROM email_outbox o
LEFT JOIN email_outbox r ON r.message_key = o.resent_as
WHERE o.message_key = %(key)s

-- name: timeline_payload
-- One receipt's frozen email (recipients, body, invoice link), read only when asked for.
SELECT payload FROM email_outbox WHERE message_key = %(key)s

-- name: timeline_stripe_events
-- The Stripe events that named this receipt, first received first.
SELECT event_id, event_type, outcome, detail, deliveries, first_received_at, last_received_at
FROM stripe_events
WHERE message_key = %(key)s
ORDER BY first_received_at

-- name: timeline_attempts
-- Every attempt of one receipt in order, with whether its lease still holds and whether the provider has forgotten its key.
SELECT a.attempt, a.worker_id, a.started_at, a.finished_at, a.http_status,
       a.provider_error, a.provider_message, a.provider_id, a.outcome,
       (o.status = 'processing' AND o.lease_token = a.lease_token
        AND o.locked_until > now()) AS lease_held,
       a.started_at < now() - make_interval(secs => %(key_retention_seconds)s) AS beyond_key_window
FROM email_attempts a JOIN email_outbox o USING (message_key)
WHERE a.message_key = %(key)s
ORDER BY a.id

-- name: timeline_operator_actions
-- Every decision a person recorded about this receipt, oldest first.
SELECT action, performed_by, reason, performed_at, details
FROM operator_actions
WHERE message_key = %(key)s
ORDER BY performed_at, id

-- name: timeline_delivery_events
-- The receipt's delivery events (evidence of unrecorded sends included), and unknown-email events that carry its Resend tag, oldest first.
SELECT svix_id, event_type, email_id, outcome, occurred_at, received_at, detail,
       email_created_at
FROM resend_events WHERE message_key = %(key)s
UNION ALL
SELECT svix_id, event_type, email_id, outcome, occurred_at, received_at, detail,
       email_created_at
FROM resend_events WHERE outcome = 'unknown_email' AND message_tag = %(tag)s
ORDER BY received_at
