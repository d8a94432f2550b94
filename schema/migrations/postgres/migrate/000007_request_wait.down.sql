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
