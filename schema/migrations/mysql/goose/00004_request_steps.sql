-- Code generated from the golang-migrate files 000004_request_steps.{up,down}.sql. DO NOT EDIT.

-- +goose Up
-- Migration 4, up: recorded steps and cancelled requests (mysql).
--
-- One ALTER TABLE adds the steps column (the JSON array of the steps a
-- request's runs recorded, written with the request's lease) and lets a
-- request be 'cancelled'. MariaDB 10.6+, MySQL 8.0.19+ (DROP CONSTRAINT).
-- The server checks every row against the new CHECK; MariaDB copies the
-- table to do so and blocks writes to it meanwhile.
--
-- Run it once. On a table that already has the column (schema.Apply
-- upgraded it before you adopted the migrations) it fails with error 1060
-- (duplicate column) and changes nothing: record version 4 as applied
-- instead (golang-migrate force 4; goose: a row in its version table).

ALTER TABLE rowlease_request
    ADD COLUMN steps LONGTEXT NULL,
    DROP CONSTRAINT rowlease_request_status_ck,
    ADD CONSTRAINT rowlease_request_status_ck CHECK (status IN ('queued', 'processing', 'success', 'error', 'interrupted', 'cancelled', 'expired'));

-- +goose Down
-- Migration 4, down (mysql).
--
-- Down restores the request table of migration 3: its CHECK, without the
-- steps column (the recorded steps are lost: a run resumed after that asks
-- its model again). While a request is 'cancelled' the statement fails
-- (MySQL error 3819, MariaDB error 4025) and the table stays as it was.
-- Finish, or delete, those first.

ALTER TABLE rowlease_request
    DROP CONSTRAINT rowlease_request_status_ck,
    ADD CONSTRAINT rowlease_request_status_ck CHECK (status IN ('queued', 'processing', 'success', 'error', 'interrupted', 'expired')),
    DROP COLUMN steps;
