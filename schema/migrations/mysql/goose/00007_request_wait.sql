-- Code generated from the golang-migrate files 000007_request_wait.{up,down}.sql. DO NOT EDIT.

-- +goose Up
-- Migration 7, up: requests that wait for a person's answer (mysql).
--
-- One ALTER TABLE lets a request be 'waiting' (its run stopped to wait for
-- a person's answer; no lease is held meanwhile) and adds the columns of
-- the open question: wait_name (the name its agent gave it), wait_question
-- (its JSON), wait_seq (the position in the request's steps at which the
-- answer is recorded) and wait_until (its deadline, by the database clock;
-- NULL: none). All four are NULL unless the request is waiting.
-- MariaDB 10.6+, MySQL 8.0.19+ (DROP CONSTRAINT). The server checks every
-- row against the new CHECK; MariaDB copies the table to do so and blocks
-- writes to it meanwhile.
--
-- Run it once. On a table that already has the columns (schema.Apply
-- upgraded it before you adopted the migrations) it fails with error 1060
-- (duplicate column) and changes nothing: record version 7 as applied
-- instead (golang-migrate force 7; goose: a row in its version table).

ALTER TABLE rowlease_request
    ADD COLUMN wait_name VARCHAR(128) NULL,
    ADD COLUMN wait_question LONGTEXT NULL,
    ADD COLUMN wait_seq INT NULL,
    ADD COLUMN wait_until DATETIME(6) NULL,
    DROP CONSTRAINT rowlease_request_status_ck,
    ADD CONSTRAINT rowlease_request_status_ck CHECK (status IN ('queued', 'processing', 'waiting', 'success', 'error', 'interrupted', 'cancelled', 'expired'));

-- +goose Down
-- Migration 7, down (mysql).
--
-- Down restores the request table of migration 6: its CHECK, without the
-- columns wait_name, wait_question, wait_seq and wait_until (the open
-- questions are lost). While a request is 'waiting' the statement fails
-- (MySQL error 3819, MariaDB error 4025) and the table stays as it was.
-- Answer, cancel or delete those first.

ALTER TABLE rowlease_request
    DROP CONSTRAINT rowlease_request_status_ck,
    ADD CONSTRAINT rowlease_request_status_ck CHECK (status IN ('queued', 'processing', 'success', 'error', 'interrupted', 'cancelled', 'expired')),
    DROP COLUMN wait_name,
    DROP COLUMN wait_question,
    DROP COLUMN wait_seq,
    DROP COLUMN wait_until;
