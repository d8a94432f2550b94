-- Code generated from the golang-migrate files 000004_request_steps.{up,down}.sql. DO NOT EDIT.

-- +goose Up
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

-- +goose Down
-- Migration 4, down (postgres).
--
-- Down restores the request table of migration 3: its CHECK, without the
-- steps column (the recorded steps are lost: a run resumed after that asks
-- its model again). While a request is 'cancelled' the re-added CHECK
-- fails (SQLSTATE 23514, check_violation) and nothing changes. Finish, or
-- delete, those first.

ALTER TABLE rowlease_request
    DROP CONSTRAINT rowlease_request_status_ck,
    ADD CONSTRAINT rowlease_request_status_ck CHECK (status IN ('queued', 'processing', 'success', 'error', 'interrupted', 'expired')),
    DROP COLUMN steps;
