-- What `receipts doctor` reads (receipts.operations.checks). Nothing here
-- writes; the NOTIFY goes to a channel of the check's own, no worker hears it.

-- name: server
-- The server's version, and the role and database this connection uses.
SELECT current_setting('server_version') AS version, current_user AS role,
       current_database() AS database

-- name: listen_probe
-- Subscribes this connection to the check's own channel.
LISTEN {}

-- name: notify_probe
-- One notification on the check's own channel, delivered when this statement commits.
SELECT pg_notify(%(channel)s, 'receipts doctor')

-- name: backend_pid
-- The server process behind this connection now: through a transaction pooler it can change between transactions.
SELECT pg_backend_pid() AS pid
