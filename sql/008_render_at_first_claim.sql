-- A receipt's email is rendered by the worker at the row's first claim, not
-- in the webhook: ingest stores what it is rendered from (render_input), the
-- claim renders it once and freezes it in payload before any send.
-- docs/architecture.md, "The frozen payload and the fingerprint".

ALTER TABLE email_outbox ADD COLUMN render_input json;  -- json, not jsonb: it keeps what jsonb refuses (\u0000)

-- A row on its way to the provider has its email, or what makes it.
ALTER TABLE email_outbox DROP CONSTRAINT sendable_has_payload;
ALTER TABLE email_outbox ADD CONSTRAINT unsent_row_has_email CHECK (
    status NOT IN ('pending', 'processing') OR payload IS NOT NULL OR render_input IS NOT NULL);

-- Once frozen, an email never changes: every send of a key carries the same
-- bytes. Clearing it (receipts prune, on sent rows) stays possible.
CREATE FUNCTION email_outbox_payload_frozen() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.payload IS NOT NULL AND NEW.payload IS NOT NULL
       AND NEW.payload IS DISTINCT FROM OLD.payload THEN
        RAISE EXCEPTION 'the frozen email of % cannot change', OLD.message_key
              USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER email_outbox_payload_frozen
    BEFORE UPDATE OF payload ON email_outbox
    FOR EACH ROW EXECUTE FUNCTION email_outbox_payload_frozen();
