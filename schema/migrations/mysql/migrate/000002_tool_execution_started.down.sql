-- Migration 2, down: restores the tool-execution status CHECK of
-- migration 1 (mysql).
--
-- The server checks every row against the re-added CHECK: if a row has status
-- 'started' the statement fails (MySQL error 3819, MariaDB error 4025) and the
-- table stays as it was. Finish or delete those executions first.

ALTER TABLE rowlease_tool_execution
    DROP CONSTRAINT rowlease_tool_execution_status_ck,
    ADD CONSTRAINT rowlease_tool_execution_status_ck CHECK (status IN ('processing', 'success', 'error'));
