-- name: accepts_writes
-- True only when this session may write: false on a standby or with read-only transactions.
SELECT current_setting('transaction_read_only') = 'off' AND NOT pg_is_in_recovery() AS writable

-- name: durable_commits
-- Every commit of this session waits until it is on disk, whatever the database's own setting (a 200 to Stripe must never outlive a crash). Through a transaction pooler this reaches one server connection only: see the README, "Durable commits" (under Deploy).
SET synchronous_commit = on

-- name: migrations_applied
-- How many of the given migration numbers are applied (a database the release phase has not migrated yet is not ready).
SELECT count(*) AS applied FROM schema_migrations WHERE version = ANY(%(versions)s)

-- name: record_write_probe
-- Proves that a write commits (a full disk, a server out of memory or a read-only one refuses it): the one probe row, updated in place.
INSERT INTO readiness_probe (id, checked_at) VALUES (true, now())
ON CONFLICT (id) DO UPDATE SET checked_at = excluded.checked_at
