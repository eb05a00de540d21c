-- name: accepts_writes
-- True only when this session may write: false on a standby or with read-only transactions.
SELECT current_setting('transaction_read_only') = 'off' AND NOT pg_is_in_recovery() AS writable
