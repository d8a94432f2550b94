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
