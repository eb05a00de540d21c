-- The support console (docs/architecture.md, "The support console").
--
-- Failed logins, in the database so that every web process (gunicorn runs
-- several, a platform may run several instances) counts the same failures:
-- after 10 for one user name or one address within 15 minutes the console
-- refuses logins for it for a while. Rows older than the window are deleted
-- as new failures come in.
CREATE TABLE console_login_failures (
    id         bigserial PRIMARY KEY,
    user_name  text NOT NULL CHECK (length(user_name) <= 64),  -- as typed, known or not
    address    text NOT NULL CHECK (length(address) <= 64),    -- the client's IP address
    failed_at  timestamptz NOT NULL
);

CREATE INDEX console_login_failures_user ON console_login_failures (user_name, failed_at);
CREATE INDEX console_login_failures_address ON console_login_failures (address, failed_at);
CREATE INDEX console_login_failures_failed_at ON console_login_failures (failed_at);

-- The console's status chart counts, per day of the last 30, the receipts that
-- went to review at ingest and those Resend did not deliver: both small sets.
CREATE INDEX stripe_events_review ON stripe_events (first_received_at) WHERE outcome = 'review';
CREATE INDEX email_outbox_not_delivered ON email_outbox (delivery_status_at)
    WHERE delivery_status IN ('bounced', 'suppressed', 'failed');
