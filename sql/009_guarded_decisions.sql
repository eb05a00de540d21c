-- Operator decisions as guarded transitions: a resend settles the receipt it
-- resends, and a receipt that could not become an email keeps the invoice it
-- would be rendered from, so `receipts review resend KEY --to ADDRESS` can
-- send it to an address a person gives. docs/architecture.md, "Operator
-- decisions", says which decision applies from which state.

-- The resend (`<key>/resend-N`) that settled this receipt: a review row with
-- one no longer needs a person (`receipts status`, /metrics, `review list`),
-- since its email went out, or is on its way, under the resend's key. NULL
-- when no resend was made, and again after `review retry` puts the row back
-- on its way (the action log keeps the history). A nullable column without a
-- default changes no row, so this takes no time.
ALTER TABLE email_outbox ADD COLUMN resent_as text;
-- A resend key names the receipt it copies: `<this row's key, or the key it
-- resends>/resend-N`. Every existing row has NULL, so NOT VALID skips nothing.
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_resent_as_names_a_resend CHECK (
    resent_as IS NULL
    OR (resent_as ~ '/resend-[0-9]+$'
        AND starts_with(resent_as,
                        regexp_replace(message_key, '/resend-[0-9]+$', '') || '/resend-'))
) NOT VALID;
