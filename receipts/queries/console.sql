-- What the support console (receipts/web/console) reads and writes of its own:
-- failed logins, and the day-by-day counts of its status chart. Everything
-- else it shows comes from the same statements as `receipts show`, `status`
-- and `review` (reports.sql, review.sql). Times come in from the console's
-- clock, so tests can move it.

-- name: login_failures
-- For one user name and one address: the failures since the given time, and the failure that blocks further logins (the given limit's newest), if there are that many.
SELECT
  (SELECT count(*) FROM console_login_failures
    WHERE user_name = %(user_name)s AND failed_at > %(since)s) AS user_failures,
  (SELECT failed_at FROM console_login_failures
    WHERE user_name = %(user_name)s AND failed_at > %(since)s
    ORDER BY failed_at DESC OFFSET %(limit)s - 1 LIMIT 1) AS user_blocked_by,
  (SELECT count(*) FROM console_login_failures
    WHERE address = %(address)s AND failed_at > %(since)s) AS address_failures,
  (SELECT failed_at FROM console_login_failures
    WHERE address = %(address)s AND failed_at > %(since)s
    ORDER BY failed_at DESC OFFSET %(limit)s - 1 LIMIT 1) AS address_blocked_by

-- name: record_login_failure
-- One failed login: the user name as typed and the client's address.
INSERT INTO console_login_failures (user_name, address, failed_at)
VALUES (%(user_name)s, %(address)s, %(failed_at)s)

-- name: forget_old_login_failures
-- Failures at or before the given time no longer count: delete them.
DELETE FROM console_login_failures WHERE failed_at <= %(before)s

-- name: receipts_per_day
-- One row per day (in the given time zone) from the first to the last given day: receipts sent, receipts that went to review (at ingest, or by an attempt's given outcomes) and sent receipts the provider did not deliver (bounced, suppressed, failed).
WITH days AS (
    SELECT day::date FROM generate_series(%(first_day)s::date, %(last_day)s::date,
                                          interval '1 day') AS day
), bounds AS (
    SELECT (%(first_day)s::date)::timestamp AT TIME ZONE %(time_zone)s AS since
), sent AS (
    SELECT (sent_at AT TIME ZONE %(time_zone)s)::date AS day, count(*) AS n
    FROM email_outbox
    WHERE status = 'sent' AND sent_at >= (SELECT since FROM bounds)
    GROUP BY 1
), to_review AS (
    SELECT (first_received_at AT TIME ZONE %(time_zone)s)::date AS day, count(*) AS n
    FROM stripe_events
    WHERE outcome = 'review' AND first_received_at >= (SELECT since FROM bounds)
    GROUP BY 1
    UNION ALL
    SELECT (finished_at AT TIME ZONE %(time_zone)s)::date AS day, count(*) AS n
    FROM email_attempts
    WHERE outcome = ANY(%(review_outcomes)s)
      AND started_at >= (SELECT since FROM bounds) - interval '1 hour'
      AND finished_at >= (SELECT since FROM bounds)
    GROUP BY 1
), not_delivered AS (
    SELECT (delivery_status_at AT TIME ZONE %(time_zone)s)::date AS day, count(*) AS n
    FROM email_outbox
    -- written out: the partial index email_outbox_not_delivered has the same words
    WHERE delivery_status IN ('bounced', 'suppressed', 'failed')
      AND delivery_status_at >= (SELECT since FROM bounds)
    GROUP BY 1
)
SELECT d.day,
       coalesce((SELECT n FROM sent WHERE sent.day = d.day), 0) AS sent,
       coalesce((SELECT sum(n) FROM to_review WHERE to_review.day = d.day), 0)::bigint
           AS to_review,
       coalesce((SELECT n FROM not_delivered WHERE not_delivered.day = d.day), 0)
           AS not_delivered
FROM days d
ORDER BY d.day
