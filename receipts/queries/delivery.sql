-- The worker's statements: claim ready rows, record what the provider said,
-- listen for new rows. All of them run as receipts_worker
-- (sql/roles/least_privilege.sql). docs/architecture.md, "Delivery: claim,
-- send, record" and "Outbox states", says what each state means.

-- name: claim_ready
-- Leases up to limit ready rows in one snapshot (expired leases, then due pending rows, oldest first, SKIP LOCKED: no row is taken twice; never a member of a live batch, which goes only with its batch); rows past the retry cutoff or the attempt budget go to review with a skipped attempt row instead, unless the provider can be asked whether it accepted an earlier attempt that may have reached it (look_up_past_limit): those are leased for that question, with past_limit saying what they become if the answer is no; each leased row comes with its latest attempt that may have reached the provider and any delivery-webhook evidence of an accepted send; returns both kinds.
WITH expired AS MATERIALIZED (
    -- The status is a literal so the planner can use the partial index
    -- email_outbox_leased; the same for email_outbox_ready below.
    SELECT message_key, attempts, first_attempt_at
      FROM email_outbox
     WHERE status = 'processing' AND locked_until <= now()
       -- a member of a live batch is sent only with its batch (claim_batches)
       AND (batch_key IS NULL OR NOT EXISTS (
               SELECT 1 FROM email_batches AS b
                WHERE b.batch_key = email_outbox.batch_key AND b.finished_at IS NULL))
     ORDER BY locked_until
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), due AS MATERIALIZED (
    SELECT message_key, attempts, first_attempt_at
      FROM email_outbox
     WHERE status = 'pending' AND available_at <= now()
       AND (batch_key IS NULL OR NOT EXISTS (
               SELECT 1 FROM email_batches AS b
                WHERE b.batch_key = email_outbox.batch_key AND b.finished_at IS NULL))
     ORDER BY available_at
     LIMIT greatest(0, %(limit)s - (SELECT count(*) FROM expired))
       FOR UPDATE SKIP LOCKED
), limits AS MATERIALIZED (
    -- The cutoff wins when both apply.
    SELECT message_key, attempts,
           CASE WHEN first_attempt_at <= now() - make_interval(secs => %(cutoff_seconds)s)
                THEN 'retry_window_elapsed'
                WHEN attempts >= %(max_attempts)s
                THEN 'attempts_exhausted'
           END AS past_limit
      FROM (SELECT * FROM expired UNION ALL SELECT * FROM due) AS locked
), ready AS MATERIALIZED (
    -- A row past a limit is asked about (a few attempts more at most) only if an
    -- attempt may have reached the provider: no answer recorded, or a retry
    -- after no reply, a 5xx or a 2xx without an id.
    SELECT l.message_key, l.past_limit,
           CASE WHEN l.past_limit IS NOT NULL
                 AND NOT (%(look_up_past_limit)s
                          AND l.attempts < %(max_attempts)s + %(lookup_attempts)s
                          AND EXISTS (
                              SELECT 1 FROM email_attempts AS a
                               WHERE a.message_key = l.message_key
                                 AND (a.outcome IS NULL OR a.outcome = 'lease_lost'
                                      OR (a.outcome = 'retry'
                                          AND (a.http_status IS NULL OR a.http_status >= 500
                                               OR a.http_status BETWEEN 200 AND 299)))))
                THEN l.past_limit
           END AS review_reason
      FROM limits AS l
), skipped AS (
    UPDATE email_outbox AS o
       SET status = 'review', review_reason = r.review_reason,
           lease_token = NULL, locked_until = NULL, updated_at = now()
      FROM ready AS r
     WHERE o.message_key = r.message_key AND r.review_reason IS NOT NULL
 RETURNING o.message_key, o.attempts, o.review_reason
), skipped_logged AS (
    -- The attempt row of a skip carries the number of the attempt not made.
    INSERT INTO email_attempts
        (message_key, attempt, worker_id, lease_token, finished_at, outcome)
    SELECT message_key, attempts + 1, %(worker_id)s, gen_random_uuid(), now(),
           CASE review_reason WHEN 'retry_window_elapsed' THEN 'skipped_cutoff'
                              ELSE 'skipped_budget' END
      FROM skipped
), leased AS (
    UPDATE email_outbox AS o
       SET status = 'processing',
           lease_token = gen_random_uuid(),
           locked_until = now() + make_interval(secs => %(lease_seconds)s),
           first_attempt_at = coalesce(o.first_attempt_at, now()),
           attempts = o.attempts + 1,
           updated_at = now()
      FROM ready AS r
     WHERE o.message_key = r.message_key AND r.review_reason IS NULL
 RETURNING o.message_key, o.lease_token, o.attempts, o.payload, o.render_input,
           o.first_attempt_at, r.past_limit
), logged AS (
    INSERT INTO email_attempts (message_key, attempt, worker_id, lease_token)
    SELECT message_key, attempts, %(worker_id)s, lease_token FROM leased
 RETURNING id, message_key
)
-- The attempts read below are those before this claim: a statement does not
-- see the rows its own INSERT adds.
SELECT l.message_key, l.lease_token, l.attempts, l.payload::text AS payload_text,
       CASE WHEN l.payload IS NULL THEN l.render_input END AS render_input,
       g.id AS attempt_id, NULL::text AS review_reason, l.past_limit, l.first_attempt_at,
       p.outcome AS prior_outcome, p.http_status AS prior_http_status,
       p.provider_error AS prior_error,
       extract(epoch FROM now() - p.started_at)::float8 AS prior_age_seconds,
       (SELECT e.email_id FROM resend_events AS e
         WHERE e.message_key = l.message_key AND e.outcome = 'evidence'
           AND e.email_id IS NOT NULL
         ORDER BY e.received_at LIMIT 1) AS evidence_id
  FROM leased AS l JOIN logged AS g USING (message_key)
  LEFT JOIN LATERAL (
      SELECT a.outcome, a.http_status, a.provider_error, a.started_at
        FROM email_attempts AS a
       WHERE a.message_key = l.message_key
         AND (a.outcome IS NULL OR a.outcome IN ('retry', 'lease_lost'))
       ORDER BY a.started_at DESC, a.id DESC
       LIMIT 1) AS p ON true
UNION ALL
SELECT message_key, NULL, attempts, NULL, NULL, NULL, review_reason, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL
  FROM skipped

-- name: freeze_rendered_payloads
-- Stores the emails rendered at their rows' first claim, each once (leased rows still without one); returns each as PostgreSQL prints it, the bytes every send carries.
UPDATE email_outbox AS o
   SET payload = r.payload, render_input = NULL, updated_at = now()
  FROM jsonb_to_recordset(%(rendered)s) AS r(message_key text, lease_token uuid, payload jsonb)
 WHERE o.message_key = r.message_key AND o.lease_token = r.lease_token AND o.payload IS NULL
RETURNING o.message_key, o.payload::text AS payload_text

-- name: review_unrenderable
-- Leased rows whose email cannot be rendered go to review with the reason; their in-flight attempt ends as review.
WITH moved AS (
    UPDATE email_outbox AS o
       SET status = 'review', review_reason = r.reason, last_error = r.error,
           lease_token = NULL, locked_until = NULL, updated_at = now()
      FROM unnest(%(keys)s::text[], %(tokens)s::uuid[], %(reasons)s::text[], %(errors)s::text[])
           AS r(message_key, lease_token, reason, error)
     WHERE o.message_key = r.message_key AND o.lease_token = r.lease_token
 RETURNING o.message_key
)
UPDATE email_attempts AS a
   SET finished_at = now(), outcome = 'review'
  FROM moved
 WHERE a.id = ANY(%(attempt_ids)s) AND a.message_key = moved.message_key

-- name: record_attempts
-- Writes each answer of a batch to its row only while that row is still processing under the claim's lease token (a provider batch whose last unrecorded member gets a final answer is finished) (a refunded attempt restarts the retry clock when no attempt of the row can have reached the provider); every attempt row is finished, as lease_lost where the lease was taken over (the row untouched); held says which. Written again after a try whose commit was not heard (the connection dropped as the server answered), it changes nothing and says held as that try did.
WITH answer AS (
    SELECT * FROM unnest(
        %(keys)s::text[], %(tokens)s::uuid[], %(attempt_ids)s::bigint[],
        %(statuses)s::text[], %(outcomes)s::text[], %(provider_ids)s::text[],
        %(reasons)s::text[], %(delays)s::float8[], %(refunds)s::int[],
        %(last_errors)s::text[], %(http_statuses)s::int[],
        %(provider_errors)s::text[], %(provider_messages)s::text[])
      AS a(message_key, lease_token, attempt_id, status, outcome, provider_id,
           review_reason, delay, refund, last_error, http_status, provider_error,
           provider_message)
), stored AS (
    UPDATE email_outbox AS o
       SET status = a.status,
           provider_id = coalesce(a.provider_id, o.provider_id),
           sent_at = CASE WHEN a.status = 'sent' THEN now() ELSE o.sent_at END,
           review_reason = a.review_reason,
           available_at = CASE WHEN a.status = 'pending'
                               THEN now() + make_interval(secs => a.delay)
                               ELSE o.available_at END,
           attempts = o.attempts - a.refund,
           -- The retry cutoff guards against a send the provider may have
           -- accepted; a refunded attempt (released, or refused for now: rate
           -- limit, quota, configuration) cannot have been, so when no other
           -- attempt can have been either, the clock starts again at the next
           -- claim: a day-long quota pause does not push the row to review.
           first_attempt_at = CASE
               WHEN a.refund = 1 AND NOT EXISTS (
                   SELECT 1 FROM email_attempts AS p
                    WHERE p.message_key = o.message_key AND p.id <> a.attempt_id
                      AND (p.outcome IS NULL OR p.outcome IN ('sent', 'retry', 'lease_lost')))
               THEN NULL ELSE o.first_attempt_at END,
           last_error = coalesce(a.last_error, o.last_error),
           lease_token = NULL, locked_until = NULL, updated_at = now()
      FROM answer AS a
     WHERE o.message_key = a.message_key AND o.lease_token = a.lease_token
       AND o.status = 'processing'
 RETURNING o.message_key, o.batch_key, o.status
), batch_finished AS (
    -- A batch whose answer is recorded for its last unrecorded member is
    -- finished: its rows may be claimed on their own from now on.
    UPDATE email_batches AS b
       SET finished_at = now()
     WHERE b.batch_key IN (SELECT s.batch_key FROM stored AS s
                            WHERE s.batch_key IS NOT NULL AND s.status <> 'pending')
       AND b.finished_at IS NULL
       AND NOT EXISTS (
           SELECT 1 FROM email_outbox AS o
            WHERE o.batch_key = b.batch_key AND o.status IN ('pending', 'processing')
              AND o.message_key NOT IN (SELECT message_key FROM stored))
), finished AS (
    UPDATE email_attempts AS t
       SET finished_at = now(),
           outcome = CASE WHEN s.message_key IS NULL THEN 'lease_lost' ELSE a.outcome END,
           http_status = a.http_status, provider_error = a.provider_error,
           provider_message = a.provider_message, provider_id = a.provider_id
      FROM answer AS a LEFT JOIN stored AS s USING (message_key)
     WHERE t.id = a.attempt_id AND t.finished_at IS NULL
    RETURNING t.id, s.message_key IS NOT NULL AS held
)
SELECT id, held FROM finished
UNION ALL
-- Attempts finished before this statement began: by an earlier try of this
-- same write, whose answer never arrived. (The statement sees the table as it
-- was when it began, not as the CTEs above leave it.)
SELECT t.id, t.outcome = a.outcome AND t.outcome <> 'lease_lost'
  FROM email_attempts AS t JOIN answer AS a ON t.id = a.attempt_id
 WHERE t.finished_at IS NOT NULL

-- name: listen
-- Subscribes this connection to the wake-ups ingest and review send on the receipts_outbox channel (vocabulary.NOTIFY_CHANNEL); polling covers any missed.
LISTEN receipts_outbox

-- name: record_sending_pause
-- Pauses all sending through this provider for the given seconds: a pause still in force is only ever lengthened (keeping when it began), an expired one is replaced; returns the pause now in force.
INSERT INTO sending_pauses AS p (provider, reason, paused_until, worker_id)
VALUES (%(provider)s, %(reason)s, now() + make_interval(secs => %(pause_seconds)s), %(worker_id)s)
ON CONFLICT (provider) DO UPDATE
   SET reason = CASE WHEN p.paused_until >= EXCLUDED.paused_until THEN p.reason
                     ELSE EXCLUDED.reason END,
       paused_at = CASE WHEN p.paused_until > now() THEN p.paused_at ELSE EXCLUDED.paused_at END,
       worker_id = CASE WHEN p.paused_until >= EXCLUDED.paused_until THEN p.worker_id
                        ELSE EXCLUDED.worker_id END,
       paused_until = greatest(p.paused_until, EXCLUDED.paused_until)
RETURNING provider, reason, paused_at, paused_until, worker_id,
          extract(epoch FROM paused_until - now())::float8 AS seconds_left

-- name: reserve_send_slot
-- Takes the next start time for a request to this provider that no worker process has taken: one interval (spacing / the limit the provider last stated, in requests/s; none while no answer has stated one) after the last one taken, and never before a wait the provider asked for; returns the seconds until it, or no row (nothing taken) when it comes later than max_wait seconds from now.
INSERT INTO send_pace AS p (provider, next_slot)
VALUES (%(provider)s, clock_timestamp())
ON CONFLICT (provider) DO UPDATE
   SET next_slot = greatest(p.next_slot, clock_timestamp())
                   + make_interval(secs => coalesce(%(spacing)s / p.team_limit, 0)),
       updated_at = clock_timestamp()
 WHERE greatest(p.next_slot, clock_timestamp())
       <= clock_timestamp() + make_interval(secs => %(max_wait)s)
RETURNING greatest(0.0, extract(epoch FROM p.next_slot - clock_timestamp())::float8
                        - coalesce(%(spacing)s / p.team_limit, 0)) AS wait_seconds

-- name: send_pace_wait
-- Seconds until this provider's next start time that no worker process has taken (no row: none taken yet).
SELECT greatest(0.0, extract(epoch FROM next_slot - clock_timestamp())::float8) AS wait_seconds
  FROM send_pace
 WHERE provider = %(provider)s

-- name: hold_send_pace
-- The provider asked for a wait (a 429, or its window used up): no worker process starts a request to it before pause_seconds from now.
INSERT INTO send_pace AS p (provider, next_slot)
VALUES (%(provider)s, clock_timestamp() + make_interval(secs => %(pause_seconds)s))
ON CONFLICT (provider) DO UPDATE
   SET next_slot = greatest(p.next_slot, EXCLUDED.next_slot), updated_at = clock_timestamp()

-- name: record_team_limit
-- The provider's limit (ratelimit-limit, in requests/s) as an answer stated it, for every worker process's next reservation; written only when it changed.
INSERT INTO send_pace AS p (provider, next_slot, team_limit)
VALUES (%(provider)s, clock_timestamp(), %(team_limit)s)
ON CONFLICT (provider) DO UPDATE
   SET team_limit = EXCLUDED.team_limit, updated_at = clock_timestamp()
 WHERE p.team_limit IS DISTINCT FROM EXCLUDED.team_limit

-- name: current_sending_pause
-- The pause in force for this provider with the seconds it has left, or no row when sending may go on.
SELECT provider, reason, paused_at, paused_until, worker_id,
       extract(epoch FROM paused_until - now())::float8 AS seconds_left
FROM sending_pauses
WHERE provider = %(provider)s AND paused_until > now()

-- name: clear_sending_pause
-- Lifts this provider's pause at once (an operator upgraded the plan); returns the pause that was in force, if any.
DELETE FROM sending_pauses
WHERE provider = %(provider)s
RETURNING provider, reason, paused_at, paused_until, worker_id,
          greatest(0, extract(epoch FROM paused_until - now()))::float8 AS seconds_left

-- name: form_batches
-- Writes new batches before their first attempt (members: batch_key, position, message_key, lease_token; batches: batch_key, provider, size, body_sha256, worker_id) and names each member row's batch and place, only on rows this claim still holds; returns the rows named (the caller rolls back unless every member is).
WITH batch AS (
    INSERT INTO email_batches (batch_key, provider, size, body_sha256, worker_id)
    SELECT batch_key, provider, size, body_sha256, worker_id
      FROM jsonb_to_recordset(%(batches)s)
           AS b(batch_key text, provider text, size int, body_sha256 text, worker_id text)
 RETURNING batch_key
)
UPDATE email_outbox AS o
   SET batch_key = m.batch_key, batch_position = m.position, updated_at = now()
  FROM jsonb_to_recordset(%(members)s)
       AS m(batch_key text, position int, message_key text, lease_token uuid)
 WHERE o.message_key = m.message_key AND o.lease_token = m.lease_token
   AND o.status = 'processing' AND m.batch_key IN (SELECT batch_key FROM batch)
RETURNING o.message_key

-- name: claim_batches
-- Leases up to limit live batches whose unanswered members are all ready (pending and due, or leased with an expired lease), oldest first, SKIP LOCKED on the batch and each member locked again before it is leased (a batch some member of which another worker just took is left alone); a batch whose members are past the retry cutoff or the attempt budget goes to review whole, without a send, and is finished; a batch with no unanswered member left is finished; returns the leased members (with their batch and place) and the members sent to review.
WITH candidate AS MATERIALIZED (
    SELECT b.batch_key
      FROM email_batches AS b
     WHERE b.finished_at IS NULL
       AND NOT EXISTS (
           SELECT 1 FROM email_outbox AS o
            WHERE o.batch_key = b.batch_key
              AND ((o.status = 'pending' AND o.available_at > now())
                   OR (o.status = 'processing' AND o.locked_until > now())))
     ORDER BY b.created_at
     LIMIT %(limit)s
       FOR UPDATE OF b SKIP LOCKED
), locked AS MATERIALIZED (
    -- Locked again: a member leased since this statement's snapshot drops out here.
    SELECT o.message_key, o.batch_key, o.attempts, o.first_attempt_at
      FROM email_outbox AS o
     WHERE o.batch_key IN (SELECT batch_key FROM candidate)
       AND ((o.status = 'pending' AND o.available_at <= now())
            OR (o.status = 'processing' AND o.locked_until <= now()))
     ORDER BY o.message_key
       FOR UPDATE
), complete AS MATERIALIZED (
    -- The cutoff wins when both apply; each is that of the batch's oldest member.
    SELECT c.batch_key,
           CASE WHEN min(l.first_attempt_at) <= now() - make_interval(secs => %(cutoff_seconds)s)
                THEN 'retry_window_elapsed'
                WHEN max(l.attempts) >= %(max_attempts)s
                THEN 'attempts_exhausted'
           END AS past_limit
      FROM candidate AS c JOIN locked AS l USING (batch_key)
     WHERE NOT EXISTS (
           SELECT 1 FROM email_outbox AS o
            WHERE o.batch_key = c.batch_key AND o.status IN ('pending', 'processing')
              AND o.message_key NOT IN (SELECT message_key FROM locked))
     GROUP BY c.batch_key
), answered AS (
    -- Every member answered (a record cut in two by a crash): nothing to send.
    SELECT c.batch_key FROM candidate AS c
     WHERE NOT EXISTS (SELECT 1 FROM locked AS l WHERE l.batch_key = c.batch_key)
       AND NOT EXISTS (SELECT 1 FROM email_outbox AS o
                        WHERE o.batch_key = c.batch_key
                          AND o.status IN ('pending', 'processing'))
), batch AS (
    UPDATE email_batches AS b
       SET attempts = b.attempts + CASE WHEN c.past_limit IS NULL THEN 1 ELSE 0 END,
           finished_at = CASE WHEN c.past_limit IS NOT NULL THEN now() END
      FROM complete AS c
     WHERE b.batch_key = c.batch_key
), done AS (
    UPDATE email_batches AS b
       SET finished_at = now()
      FROM answered AS a
     WHERE b.batch_key = a.batch_key
), skipped AS (
    UPDATE email_outbox AS o
       SET status = 'review', review_reason = c.past_limit,
           lease_token = NULL, locked_until = NULL, updated_at = now()
      FROM locked AS l JOIN complete AS c USING (batch_key)
     WHERE o.message_key = l.message_key AND c.past_limit IS NOT NULL
 RETURNING o.message_key, o.attempts, o.review_reason
), skipped_logged AS (
    INSERT INTO email_attempts
        (message_key, attempt, worker_id, lease_token, finished_at, outcome)
    SELECT message_key, attempts + 1, %(worker_id)s, gen_random_uuid(), now(),
           CASE review_reason WHEN 'retry_window_elapsed' THEN 'skipped_cutoff'
                              ELSE 'skipped_budget' END
      FROM skipped
), leased AS (
    UPDATE email_outbox AS o
       SET status = 'processing',
           lease_token = gen_random_uuid(),
           locked_until = now() + make_interval(secs => %(lease_seconds)s),
           first_attempt_at = coalesce(o.first_attempt_at, now()),
           attempts = o.attempts + 1,
           updated_at = now()
      FROM locked AS l JOIN complete AS c USING (batch_key)
     WHERE o.message_key = l.message_key AND c.past_limit IS NULL
 RETURNING o.message_key, o.lease_token, o.attempts, o.first_attempt_at,
           o.batch_key, o.batch_position
), logged AS (
    INSERT INTO email_attempts (message_key, attempt, worker_id, lease_token)
    SELECT message_key, attempts, %(worker_id)s, lease_token FROM leased
 RETURNING id, message_key
)
SELECT l.message_key, l.lease_token, l.attempts, g.id AS attempt_id, l.first_attempt_at,
       l.batch_key, l.batch_position, NULL::text AS review_reason
  FROM leased AS l JOIN logged AS g USING (message_key)
UNION ALL
SELECT message_key, NULL, attempts, NULL, NULL, NULL, NULL, review_reason
  FROM skipped

-- name: batch_bodies
-- Each batch's request body as its first attempt sent it: every member's frozen email, in the batch's order, in one JSON array, with the digest stored then and how many members still carry their email.
SELECT b.batch_key, b.body_sha256, b.size,
       count(o.payload) AS members,
       '[' || string_agg(o.payload::text, ',' ORDER BY o.batch_position) || ']' AS body
  FROM email_batches AS b
  JOIN email_outbox AS o ON o.batch_key = b.batch_key
 WHERE b.batch_key = ANY(%(batch_keys)s)
 GROUP BY b.batch_key, b.body_sha256, b.size
