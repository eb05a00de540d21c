-- What `receipts prune` walks to drop old details and, much later, old keys:
-- sent receipts by the time they settled (the later of sent and created, so
-- an import with an old send time is kept for the full period). Pending rows
-- are not in it, so ingest does not maintain it.
CREATE INDEX email_outbox_settled ON email_outbox ((greatest(sent_at, created_at)), message_key)
    WHERE status = 'sent';
