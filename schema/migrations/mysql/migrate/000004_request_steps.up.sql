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
