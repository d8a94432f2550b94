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
