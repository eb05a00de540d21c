-- What `receipts doctor` and a refused command use to say which privilege a
-- database role lacks (receipts.operations.privileges). The statement checked
-- is prepared and explained, never run: the executor checks every table and
-- column privilege it needs before it would read a row.

-- name: current_role
-- The role this connection acts as, and the database.
SELECT current_user AS role, current_database() AS database

-- name: prepare_checked
-- Parses and plans one of the product's statements under a fixed name, without running it.
PREPARE receipts_privilege_check AS {statement}

-- name: explain_checked
-- Starts the executor on the prepared statement (checking its privileges) and stops before the first row.
EXPLAIN (COSTS OFF) EXECUTE receipts_privilege_check {arguments}

-- name: deallocate_checked
-- Forgets the prepared statement (prepared statements outlive a rollback).
DEALLOCATE receipts_privilege_check

-- name: table_privileges
-- Whether the role has the privilege on the whole table, and on at least one of its columns.
SELECT has_table_privilege(%(table)s, %(privilege)s) AS on_table,
       CASE WHEN upper(%(privilege)s) IN ('SELECT', 'INSERT', 'UPDATE')
            THEN has_any_column_privilege(%(table)s, %(privilege)s)
            ELSE has_table_privilege(%(table)s, %(privilege)s) END AS on_some_columns
