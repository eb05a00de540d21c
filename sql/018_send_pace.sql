-- The fleet's send pace (docs/architecture.md, "The fleet's share of the
-- provider's limit").
--
-- Every worker process takes each provider request's start time from this
-- one row per provider: next_slot is the earliest moment the next request of
-- any worker may start, and each reservation moves it on by one interval,
-- RECEIPTS_SEND_SHARE of team_limit (the provider's own ratelimit-limit,
-- per second, as the last answer that carried it said). A 429 moves next_slot
-- past the wait it asked for, so the whole fleet backs off at once, and the
-- rest of the provider's limit stays free for the app's own mail.
CREATE TABLE send_pace (
    provider    text PRIMARY KEY,
    next_slot   timestamptz NOT NULL,
    team_limit  double precision CHECK (team_limit > 0),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
