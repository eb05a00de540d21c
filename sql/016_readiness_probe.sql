-- /readyz proves that a write can commit (docs/architecture.md, "Readiness").
--
-- A server whose disk is full, that is out of memory or that refuses writes
-- still answers reads; only a commit tells. The readiness check upserts this
-- one row and commits, at most once every few seconds per web process: the
-- table never holds more than the one row, updated in place.
CREATE TABLE readiness_probe (
    id         boolean PRIMARY KEY DEFAULT true CHECK (id),  -- only ever the one row
    checked_at timestamptz NOT NULL                          -- the last write that committed
);
