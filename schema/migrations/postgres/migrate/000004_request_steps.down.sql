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
