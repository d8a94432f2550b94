-- Migration 2, down: restores the tool-execution status CHECK of
-- migration 1 (postgres).
--
-- The re-added CHECK is validated against every row: if a row has status
-- 'started' the statement fails (SQLSTATE 23514, check_violation) and nothing
-- changes. Finish or delete those executions first.

ALTER TABLE rowlease_tool_execution
    DROP CONSTRAINT rowlease_tool_execution_status_ck,
    ADD CONSTRAINT rowlease_tool_execution_status_ck CHECK (status IN ('processing', 'success', 'error'));
