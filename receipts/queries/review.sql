-- Decisions a person takes about receipts in review (`receipts review`).
-- Each runs in the caller's transaction after the row is locked; a change
-- only applies while the row is still in review, and every decision is
-- recorded in operator_actions.
--
-- Row statuses are written out (the schema's CHECK and partial indexes use the
-- same words); review reasons and the wake-up channel come in as parameters.

-- name: record_operator_action
-- One operator_actions row: which receipt, what was decided, by whom, why, with details.
INSERT INTO operator_actions (message_key, action, performed_by, reason, details)
VALUES (%(key)s, %(action)s, %(performed_by)s, %(reason)s, %(details)s)

-- name: list_review_rows
-- Rows in review, oldest first, with the invoice as support knows it and the provider's last answer; dismissed ones only when all are asked for or the dismissed reason is.
SELECT o.message_key, o.invoice_id, o.review_reason, o.attempts, o.created_at, o.updated_at,
       extract(epoch FROM now() - o.created_at)::float8 AS age_seconds,
       o.first_attempt_at, o.last_error, o.payload IS NOT NULL AS has_email,
       coalesce(o.customer_email, o.payload -> 'to' ->> 0) AS customer_email,
       o.invoice_number, o.amount, o.currency,
       last.http_status AS last_http_status, last.provider_error AS last_provider_error,
       last.provider_message AS last_provider_message,
       EXISTS (SELECT 1 FROM email_attempts a
                WHERE a.message_key = o.message_key
                  AND a.outcome IS NULL AND a.finished_at IS NULL) AS abandoned_attempt
FROM email_outbox o
LEFT JOIN LATERAL (
    -- The last answer the provider gave for this receipt, if it gave one.
    SELECT http_status, provider_error, provider_message FROM email_attempts a
     WHERE a.message_key = o.message_key AND a.finished_at IS NOT NULL
       AND (a.http_status IS NOT NULL OR a.provider_error IS NOT NULL)
     ORDER BY a.started_at DESC, a.id DESC
     LIMIT 1
) AS last ON true
WHERE o.status = 'review'
  AND (%(reason)s::text IS NULL OR o.review_reason = %(reason)s)
  AND (%(all)s OR %(reason)s::text = %(dismissed)s OR o.review_reason <> %(dismissed)s)
ORDER BY o.created_at, o.message_key

-- name: evidence_of_unrecorded_sends
-- Each email Resend reported that no receipt recorded, for the given receipts (evidence) or tags (older unknown-email events), with when Resend accepted it.
SELECT message_key, message_tag, email_id,
       min(coalesce(email_created_at, occurred_at, received_at)) AS accepted_at
FROM resend_events
WHERE email_id IS NOT NULL
  AND ((outcome = 'evidence' AND message_key = ANY(%(keys)s))
       OR (outcome = 'unknown_email' AND message_tag = ANY(%(tags)s)))
GROUP BY message_key, message_tag, email_id
ORDER BY accepted_at, email_id

-- name: lock_receipt
-- The whole row of one receipt, locked until the transaction ends; no row when the key is unknown.
SELECT * FROM email_outbox WHERE message_key = %(key)s FOR UPDATE

-- name: lock_receipt_and_original
-- The rows of a receipt and of the receipt it resends (if any), locked in key order.
SELECT * FROM email_outbox
WHERE message_key IN (%(original)s, %(key)s)
ORDER BY message_key
FOR UPDATE

-- name: review_attempts
-- One receipt's attempts oldest first, with whether the provider has forgotten their key and whether the retry cutoff counted from them has passed.
SELECT attempt, started_at, finished_at, http_status, outcome,
       started_at < now() - make_interval(secs => %(key_retention_seconds)s) AS beyond_key_window,
       started_at < now() - make_interval(secs => %(cutoff_seconds)s) AS past_cutoff
FROM email_attempts
WHERE message_key = %(key)s
ORDER BY started_at, id

-- name: mark_review_row_sent
-- A row still in review becomes sent with the provider's id; its reason and lease are cleared.
UPDATE email_outbox
SET status = 'sent', provider_id = %(provider_id)s, sent_at = coalesce(%(sent_at)s, now()),
    review_reason = NULL, lease_token = NULL, locked_until = NULL, updated_at = now()
WHERE message_key = %(key)s AND status = 'review'

-- name: apply_reported_delivery_status
-- A row resolved as sent takes the most final delivery status Resend already reported for its email id (types, statuses and ranks given), with that event's reason and time; nothing when none was reported.
UPDATE email_outbox AS o
   SET delivery_status = e.status,
       delivery_status_at = coalesce(e.occurred_at, e.received_at),
       delivery_detail = e.detail,
       updated_at = now()
  FROM (SELECT s.status, r.occurred_at, r.received_at, r.detail
          FROM resend_events AS r
          JOIN unnest(%(event_types)s::text[], %(statuses)s::text[], %(ranks)s::int[])
               AS s(event_type, status, rank) USING (event_type)
         WHERE r.email_id = %(provider_id)s
         ORDER BY s.rank DESC, r.occurred_at DESC NULLS LAST
         LIMIT 1) AS e
 WHERE o.message_key = %(key)s AND o.status = 'sent'
RETURNING o.delivery_status

-- name: requeue_review_row
-- A row still in review becomes pending and ready now, with no attempts and the given retry window start.
UPDATE email_outbox
SET status = 'pending', review_reason = NULL, attempts = 0, first_attempt_at = %(window_start)s,
    available_at = now(), lease_token = NULL, locked_until = NULL, updated_at = now()
WHERE message_key = %(key)s AND status = 'review'

-- name: dismiss_review_row
-- A row still in review takes the dismissed reason; it stays in review and is never sent.
UPDATE email_outbox
SET review_reason = %(dismissed)s, updated_at = now()
WHERE message_key = %(key)s AND status = 'review'

-- name: unsent_resend
-- A resend of the receipt (keys starting with the given prefix) still pending or processing, if any.
SELECT message_key, status
FROM email_outbox
WHERE starts_with(message_key, %(prefix)s) AND status IN ('pending', 'processing')

-- name: resend_keys
-- The keys of every resend of the receipt (keys starting with the given prefix).
SELECT message_key FROM email_outbox WHERE starts_with(message_key, %(prefix)s)

-- name: insert_resend_row
-- One new pending row under the resend's key, carrying the original's facts and fingerprint.
INSERT INTO email_outbox
    (message_key, purpose, account, livemode, invoice_id, source_event_id,
     fingerprint, payload, status, invoice_number, customer_email, amount, currency)
VALUES (%(key)s, %(purpose)s, %(account)s, %(livemode)s, %(invoice_id)s, %(source_event_id)s,
        %(fingerprint)s, %(payload)s, 'pending', %(invoice_number)s, %(customer_email)s,
        %(amount)s, %(currency)s)

-- name: wake_workers
-- Idle workers listening on the channel wake when this transaction commits.
SELECT pg_notify(%(channel)s, '')
