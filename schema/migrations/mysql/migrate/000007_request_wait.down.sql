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
