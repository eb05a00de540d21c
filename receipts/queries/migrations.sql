-- `receipts migrate`: which numbered files of sql/ have been applied. The
-- migration files themselves stay in sql/; this is only their bookkeeping.

-- name: take_migration_lock
-- Only one migrating transaction runs at a time; a second waits here until the first ends.
SELECT pg_advisory_xact_lock(%(lock_id)s)

-- name: create_schema_migrations
-- The bookkeeping table exists; an existing one is left as it is.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- name: applied_migration_versions
-- The number of every migration already applied.
SELECT version FROM schema_migrations

-- name: record_applied_migration
-- One row per applied migration: its number and name, with the time it was applied.
INSERT INTO schema_migrations (version, name) VALUES (%(version)s, %(name)s)
