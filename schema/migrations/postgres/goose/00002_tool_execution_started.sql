-- Code generated from the golang-migrate files 000002_tool_execution_started.{up,down}.sql. DO NOT EDIT.

-- +goose Up
-- Migration 2, up: a tool execution may have status 'started' (postgres).
--
-- One ALTER TABLE drops and re-adds the CHECK in one transaction. It takes an
-- ACCESS EXCLUSIVE lock on rowlease_tool_execution and reads every row once.

ALTER TABLE rowlease_tool_execution
    DROP CONSTRAINT rowlease_tool_execution_status_ck,
    ADD CONSTRAINT rowlease_tool_execution_status_ck CHECK (status IN ('processing', 'started', 'success', 'error'));

-- +goose Down
-- Migration 2, down: restores the tool-execution status CHECK of
-- migration 1 (postgres).
--
-- The re-added CHECK is validated against every row: if a row has status
-- 'started' the statement fails (SQLSTATE 23514, check_violation) and nothing
-- changes. Finish or delete those executions first.

ALTER TABLE rowlease_tool_execution
    DROP CONSTRAINT rowlease_tool_execution_status_ck,
    ADD CONSTRAINT rowlease_tool_execution_status_ck CHECK (status IN ('processing', 'success', 'error'));
