-- Migration 3, down (mysql).
--
-- Down restores the request table of migration 2: the CHECK of migration 1,
-- without the new columns (their values are lost) and keys. The server
-- checks every row against the re-added CHECK: while a request is 'queued',
-- 'interrupted' or 'expired' the statement fails (MySQL error 3819, MariaDB
-- error 4025) and the table stays as it was. Finish, or delete, those first.

ALTER TABLE rowlease_request
    DROP CONSTRAINT rowlease_request_status_ck,
    ADD CONSTRAINT rowlease_request_status_ck CHECK (status IN ('processing', 'success', 'error')),
    DROP INDEX rowlease_request_status_updated_idx,
    DROP INDEX rowlease_request_session_queue_uq,
    DROP COLUMN interrupted_by,
    DROP COLUMN on_busy,
    DROP COLUMN queue_seq,
    DROP COLUMN content;
