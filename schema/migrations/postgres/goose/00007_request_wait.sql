-- Code generated from the golang-migrate files 000007_request_wait.{up,down}.sql. DO NOT EDIT.

-- +goose Up
-- Migration 7, up: requests that wait for a person's answer (postgres).
--
-- One ALTER TABLE lets a request be 'waiting' (its run stopped to wait for
-- a person's answer; no lease is held meanwhile) and adds the columns of
-- the open question: wait_name (the name its agent gave it), wait_question
-- (its JSON), wait_seq (the position in the request's steps at which the
-- answer is recorded) and wait_until (its deadline, by the database clock;
-- NULL: none). All four are NULL unless the request is waiting. It takes
-- an ACCESS EXCLUSIVE lock on rowlease_request and reads every row once.
-- On a table that already has them (schema.Apply upgraded it) it changes
-- nothing.

ALTER TABLE rowlease_request
    ADD COLUMN IF NOT EXISTS wait_name VARCHAR(128) NULL,
    ADD COLUMN IF NOT EXISTS wait_question TEXT NULL,
    ADD COLUMN IF NOT EXISTS wait_seq INTEGER NULL,
    ADD COLUMN IF NOT EXISTS wait_until TIMESTAMPTZ NULL,
    DROP CONSTRAINT rowlease_request_status_ck,
    ADD CONSTRAINT rowlease_request_status_ck CHECK (status IN ('queued', 'processing', 'waiting', 'success', 'error', 'interrupted', 'cancelled', 'expired'));

-- +goose Down
-- Migration 7, down (postgres).
--
-- Down restores the request table of migration 6: its CHECK, without the
-- columns wait_name, wait_question, wait_seq and wait_until (the open
-- questions are lost). While a request is 'waiting' the re-added CHECK
-- fails (SQLSTATE 23514, check_violation) and nothing changes. Answer,
-- cancel or delete those first.

ALTER TABLE rowlease_request
    DROP CONSTRAINT rowlease_request_status_ck,
    ADD CONSTRAINT rowlease_request_status_ck CHECK (status IN ('queued', 'processing', 'success', 'error', 'interrupted', 'cancelled', 'expired')),
    DROP COLUMN wait_name,
    DROP COLUMN wait_question,
    DROP COLUMN wait_seq,
    DROP COLUMN wait_until;
