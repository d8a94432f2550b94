-- Migration 4, up: recorded steps and cancelled requests (postgres).
--
-- One ALTER TABLE adds the steps column (the JSON array of the steps a
-- request's runs recorded, written with the request's lease) and lets a
-- request be 'cancelled'. It takes an ACCESS EXCLUSIVE lock on
-- rowlease_request and reads every row once. On a table that already has
-- them (schema.Apply upgraded it) it changes nothing.

ALTER TABLE rowlease_request
    ADD COLUMN IF NOT EXISTS steps TEXT NULL,
    DROP CONSTRAINT rowlease_request_status_ck,
    ADD CONSTRAINT rowlease_request_status_ck CHECK (status IN ('queued', 'processing', 'success', 'error', 'interrupted', 'cancelled', 'expired'));
