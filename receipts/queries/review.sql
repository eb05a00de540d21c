-- Decisions a person takes about receipts in review (`receipts review`).
-- Each runs in the caller's transaction: it takes the lock of the receipt's
-- family (the receipt and its resends), locks the row it decides, reads the
-- family, and changes a row only while it is still in the state the decision
-- applies to; every decision is recorded in operator_actions.
--
-- Row statuses are written out (the schema's CHECK and partial indexes use the
-- same words); review reasons and the wake-up channel come in as parameters.

-- name: record_operator_action
-- One operator_actions row: which receipt, what was decided, by whom, why, with details.
INSERT INTO operator_actions (message_key, action, performed_by, reason, details)
VALUES (%(key)s, %(action)s, %(performed_by)s, %(reason)s, %(details)s)

-- name: list_review_rows
-- Rows in review, oldest first, with the invoice as support knows it, the provider's last answer and the resend that settled it; settled ones (dismissed or resent) only when all are asked for, dismissed ones also when their reason is.
SELECT o.message_key, o.invoice_id, o.review_reason, o.attempts, o.created_at, o.updated_at,
       extract(epoch FROM now() - o.created_at)::float8 AS age_seconds,
       o.first_attempt_at, o.last_error, o.payload IS NOT NULL AS has_email,
       o.render_input IS NOT NULL AS has_render_input,
       coalesce(o.customer_email, o.payload -> 'to' ->> 0) AS customer_email,
       o.invoice_number, o.amount, o.currency, o.resent_as,
       r.status AS resend_status, r.sent_at AS resend_sent_at,
       r.review_reason AS resend_review_reason,
       last.http_status AS last_http_status, last.provider_error AS last_provider_error,
       last.provider_message AS last_provider_message,
       EXISTS (SELECT 1 FROM email_attempts a
                WHERE a.message_key = o.message_key
                  AND a.outcome IS NULL AND a.finished_at IS NULL) AS abandoned_attempt
FROM email_outbox o
LEFT JOIN email_outbox r ON r.message_key = o.resent_as
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
  AND (%(all)s
       OR (o.resent_as IS NULL
           AND (%(reason)s::text = %(dismissed)s OR o.review_reason <> %(dismissed)s)))
ORDER BY o.created_at, o.message_key

-- name: count_settled_review_rows
-- Review rows that need nobody, of the given reason if one is given: dismissed ones, and those a resend settled.
SELECT count(*) FILTER (WHERE resent_as IS NOT NULL) AS resent,
       count(*) FILTER (WHERE resent_as IS NULL AND review_reason = %(dismissed)s) AS dismissed
FROM email_outbox
WHERE status = 'review'
  AND (%(reason)s::text IS NULL OR review_reason = %(reason)s)
  AND (resent_as IS NOT NULL OR review_reason = %(dismissed)s)

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

-- name: lock_receipt_family
-- Serializes every decision about one receipt and its resends (the key without its /resend-N, given): held until the transaction ends. Advisory locks with two keys never meet the one-key lock of `receipts migrate`.
SELECT pg_advisory_xact_lock(%(lock_space)s, hashtext(%(base)s))

-- name: lock_receipt
-- The whole row of one receipt, locked until the transaction ends; no row when the key is unknown.
SELECT * FROM email_outbox WHERE message_key = %(key)s FOR UPDATE

-- name: family_rows
-- The receipt with the given base key and each of its resends (keys starting with the given prefix), read through the invoice index, in key order; what a decision's guard needs, not the emails.
SELECT message_key, status, review_reason, resent_as, attempts, provider_id, sent_at,
       delivery_status, created_at, payload IS NOT NULL AS has_email,
       render_input IS NOT NULL AS has_render_input
FROM email_outbox
WHERE invoice_id = %(invoice_id)s
  AND (message_key = %(base)s OR starts_with(message_key, %(prefix)s))
ORDER BY message_key

-- name: family_attempts
-- The attempts of the given receipts, oldest first, with how many seconds ago each started by the database clock.
SELECT message_key, attempt, started_at, finished_at, http_status, outcome,
       extract(epoch FROM now() - started_at)::float8 AS age_seconds
FROM email_attempts
WHERE message_key = ANY(%(keys)s)
ORDER BY started_at, id

-- name: family_actions
-- Every decision recorded about the given receipts, oldest first.
SELECT message_key, action, performed_by, reason, performed_at, details
FROM operator_actions
WHERE message_key = ANY(%(keys)s)
ORDER BY performed_at, id

-- name: mark_review_row_sent
-- A row still in review becomes sent with the provider's id; its reason and lease are cleared. Returns the key when it changed.
UPDATE email_outbox
SET status = 'sent', provider_id = %(provider_id)s, sent_at = coalesce(%(sent_at)s, now()),
    review_reason = NULL, lease_token = NULL, locked_until = NULL, updated_at = now()
WHERE message_key = %(key)s AND status = 'review'
RETURNING message_key

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
-- A row still in review (and sendable: an email, or what makes one) becomes pending and ready now, with no attempts, the given retry window start and no settling resend. Returns the key when it changed.
UPDATE email_outbox
SET status = 'pending', review_reason = NULL, attempts = 0, first_attempt_at = %(window_start)s,
    available_at = now(), lease_token = NULL, locked_until = NULL, resent_as = NULL,
    updated_at = now()
WHERE message_key = %(key)s AND status = 'review'
  AND (payload IS NOT NULL OR render_input IS NOT NULL)
RETURNING message_key

-- name: dismiss_review_row
-- A row still in review, neither dismissed nor settled by a resend, takes the dismissed reason; it stays in review and is never sent. Returns the key when it changed.
UPDATE email_outbox
SET review_reason = %(dismissed)s, updated_at = now()
WHERE message_key = %(key)s AND status = 'review'
  AND review_reason <> %(dismissed)s AND resent_as IS NULL
RETURNING message_key

-- name: settle_resent_rows
-- The given rows of a family, where still in review (or sent: a record only), are settled by the new resend; a dismissed one only when named as undone, taking back its earlier reason. Returns the keys changed.
UPDATE email_outbox AS o
SET resent_as = %(new_key)s,
    review_reason = CASE WHEN o.message_key = %(undone_key)s::text
                         THEN coalesce(%(undone_reason)s::text, o.review_reason)
                         ELSE o.review_reason END,
    updated_at = now()
WHERE o.message_key = ANY(%(keys)s)
  AND (o.status = 'sent'
       OR (o.status = 'review'
           AND (o.review_reason <> %(dismissed)s OR o.message_key = %(undone_key)s::text)))
RETURNING o.message_key

-- name: insert_resend_row
-- One new pending row under the resend's key, carrying the original's facts and fingerprint, with its email or what the worker renders it from at the first claim.
INSERT INTO email_outbox
    (message_key, purpose, account, livemode, invoice_id, source_event_id,
     fingerprint, payload, render_input, status, invoice_number, customer_email, amount,
     currency)
VALUES (%(key)s, %(purpose)s, %(account)s, %(livemode)s, %(invoice_id)s, %(source_event_id)s,
        %(fingerprint)s, %(payload)s, %(render_input)s, 'pending', %(invoice_number)s,
        %(customer_email)s, %(amount)s, %(currency)s)

-- name: wake_workers
-- Idle workers listening on the channel wake when this transaction commits.
SELECT pg_notify(%(channel)s, '')
