-- `receipts import`: receipts an earlier system already sent become sent rows,
-- all in the caller's transaction (all or nothing).

-- name: create_import_rows
-- A table of the file's lines visible to this session only, dropped at commit or rollback.
CREATE TEMPORARY TABLE import_rows (
    line integer, message_key text, account text, livemode boolean,
    invoice_id text, sent_at timestamptz, provider_id text
) ON COMMIT DROP

-- name: copy_import_rows
-- Every line of the file into import_rows in one round trip.
COPY import_rows (line, message_key, account, livemode, invoice_id, sent_at, provider_id)
FROM STDIN

-- name: insert_imported_rows
-- A sent row without an email for each line whose key is free; a taken key is left as it is. Returns the keys inserted.
INSERT INTO email_outbox
    (message_key, purpose, account, livemode, invoice_id, source_event_id,
     fingerprint, payload, status, provider_id, sent_at)
SELECT message_key, %(purpose)s, account, livemode, invoice_id, %(source_event_id)s,
       %(fingerprint_prefix)s || message_key, NULL, 'sent', provider_id, sent_at
FROM import_rows
ORDER BY line
ON CONFLICT (message_key) DO NOTHING
RETURNING message_key

-- name: record_import_actions
-- One import action per given key, naming the file, its line and the provider id.
INSERT INTO operator_actions (message_key, action, performed_by, reason, details)
SELECT message_key, 'import', %(performed_by)s, %(reason)s,
       jsonb_build_object('file', %(file)s::text, 'line', line, 'provider_id', provider_id)
FROM import_rows
WHERE message_key = ANY(%(keys)s)

-- name: existing_receipts
-- Each given key that has a row: its state, whether an import recorded it (fingerprint prefix given), when and under which provider id it was sent, and the resend that settled it with how far that got.
SELECT o.message_key, o.status, o.review_reason, o.provider_id, o.sent_at,
       starts_with(o.fingerprint, %(imported_prefix)s) AS imported,
       o.resent_as, r.status AS resend_status, r.provider_id AS resend_provider_id,
       r.sent_at AS resend_sent_at
FROM email_outbox o
LEFT JOIN email_outbox r ON r.message_key = o.resent_as
WHERE o.message_key = ANY(%(keys)s)

-- name: record_sent_twice
-- One import_found_sent_twice action on a receipt this system sent that the file says the earlier sender sent too, with both sends.
INSERT INTO operator_actions (message_key, action, performed_by, reason, details)
VALUES (%(key)s, 'import_found_sent_twice', %(performed_by)s, %(reason)s, %(details)s)
