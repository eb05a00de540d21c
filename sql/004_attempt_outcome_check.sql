-- email_attempts.outcome holds only the words of receipts.vocabulary.AttemptOutcome,
-- or NULL: the attempt is in flight, or its worker died before recording it (an
-- ambiguous attempt). docs/architecture.md, "Attempt outcomes", says what each means.
--
-- A plain ADD CONSTRAINT, validated at once, rather than NOT VALID now and
-- VALIDATE CONSTRAINT later: `receipts migrate` applies every pending file in one
-- transaction, so a VALIDATE in that same transaction would still run under the
-- ACCESS EXCLUSIVE lock that ADD CONSTRAINT takes, and the split would gain
-- nothing. The scan is short because `receipts prune` keeps only recent attempts:
-- about 0.2 s per million rows (measured on 2 cores, warm cache), during which
-- claims and /metrics wait on the lock instead of failing. Every value the worker
-- has ever written is in the list; a row holding anything else (a hand edit) makes
-- the release fail with a check violation and changes nothing, so it is found and
-- fixed rather than hidden behind a constraint that old rows never met.
ALTER TABLE email_attempts
    ADD CONSTRAINT email_attempts_outcome_check CHECK (
        outcome IS NULL
        OR outcome IN ('sent', 'retry', 'review', 'lease_lost', 'config_error', 'released',
                       'skipped_cutoff', 'skipped_budget'));
