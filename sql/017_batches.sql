-- Idempotent batches (docs/architecture.md, "Batches").
--
-- With RECEIPTS_BATCH_SIZE above 1 the worker sends up to that many receipts
-- in one provider request (Resend's POST /emails/batch) under the batch's own
-- Idempotency-Key. Before the first attempt it writes the batch here and
-- names each member row's batch and position: a retry of the batch resends
-- exactly those rows, in that order, with their frozen emails (which a
-- trigger keeps from changing), under the same key. body_sha256 is the digest
-- of the request body the first attempt sent; a retry that would not send the
-- same bytes goes to a person instead. A batch is live until its answer is
-- recorded (finished_at); a row is in at most one live batch (its batch_key),
-- and the batch's lease is its rows' locked_until.
CREATE TABLE email_batches (
    batch_key        text PRIMARY KEY CHECK (length(batch_key) <= 256),
    provider         text NOT NULL,
    size             integer NOT NULL CHECK (size >= 1),
    body_sha256      text NOT NULL,
    attempts         integer NOT NULL DEFAULT 1,
    worker_id        text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    first_attempt_at timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
);

-- Batches a worker may have to send again: few, however many are finished.
CREATE INDEX email_batches_live ON email_batches (created_at) WHERE finished_at IS NULL;

ALTER TABLE email_outbox
    ADD COLUMN batch_key text REFERENCES email_batches (batch_key),
    ADD COLUMN batch_position integer,
    ADD CONSTRAINT email_outbox_batch_position CHECK (
        (batch_key IS NULL) = (batch_position IS NULL) AND coalesce(batch_position, 0) >= 0);

CREATE INDEX email_outbox_batch ON email_outbox (batch_key, batch_position)
    WHERE batch_key IS NOT NULL;
