-- What `receipts prune` walks: sent receipts by the time they settled, and
-- events by when they first arrived. Without these, each prune batch would
-- scan the whole table.
CREATE INDEX email_outbox_settled ON email_outbox ((coalesce(sent_at, created_at)), message_key)
    WHERE status = 'sent';
CREATE INDEX stripe_events_first_received ON stripe_events (first_received_at);
