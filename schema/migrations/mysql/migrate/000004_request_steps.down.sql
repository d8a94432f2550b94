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
