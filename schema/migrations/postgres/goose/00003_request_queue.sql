-- Code generated from the golang-migrate files 000003_request_queue.{up,down}.sql. DO NOT EDIT.

-- +goose Up
-- Migration 3, up: queued and interrupted requests, retention (postgres).
--
-- One ALTER TABLE adds the columns and the unique key the queue, interrupts
-- and retention need (content, queue_seq, on_busy, interrupted_by; UNIQUE
-- (session_key, queue_seq)) and lets a request be 'queued', 'interrupted'
-- or 'expired'; an index on (status, updated_at) follows. The ALTER TABLE
-- takes an ACCESS EXCLUSIVE lock on rowlease_request and reads every row
-- once. On a table that already has them (schema.Apply upgraded it) it
-- changes nothing.

ALTER TABLE rowlease_request
    ADD COLUMN IF NOT EXISTS content TEXT NULL,
    ADD COLUMN IF NOT EXISTS queue_seq BIGINT NULL,
    ADD COLUMN IF NOT EXISTS on_busy VARCHAR(16) NULL,
    ADD COLUMN IF NOT EXISTS interrupted_by VARCHAR(191) NULL,
    DROP CONSTRAINT IF EXISTS rowlease_request_session_queue_uq,
    ADD CONSTRAINT rowlease_request_session_queue_uq UNIQUE (session_key, queue_seq),
    DROP CONSTRAINT rowlease_request_status_ck,
    ADD CONSTRAINT rowlease_request_status_ck CHECK (status IN ('queued', 'processing', 'success', 'error', 'interrupted', 'expired'));

CREATE INDEX IF NOT EXISTS rowlease_request_status_updated_idx
    ON rowlease_request (status, updated_at);

-- +goose Down
-- Migration 3, down (postgres).
--
-- Down restores the request table of migration 2: the CHECK of migration 1,
-- without the new columns (their values are lost), key and index. While a
-- request is 'queued', 'interrupted' or 'expired' the re-added CHECK fails
-- (SQLSTATE 23514, check_violation) and nothing changes. Finish, or delete,
-- those first.

DROP INDEX IF EXISTS rowlease_request_status_updated_idx;

ALTER TABLE rowlease_request
    DROP CONSTRAINT rowlease_request_status_ck,
    ADD CONSTRAINT rowlease_request_status_ck CHECK (status IN ('processing', 'success', 'error')),
    DROP CONSTRAINT rowlease_request_session_queue_uq,
    DROP COLUMN interrupted_by,
    DROP COLUMN on_busy,
    DROP COLUMN queue_seq,
    DROP COLUMN content;
