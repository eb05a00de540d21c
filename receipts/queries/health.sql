-- name: ping
-- Succeeds only when the database answers a query; reads no table.
SELECT 1
