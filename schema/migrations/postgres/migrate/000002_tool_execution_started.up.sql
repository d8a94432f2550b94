-- Migration 2, up: a tool execution may have status 'started' (postgres).
--
-- One ALTER TABLE drops and re-adds the CHECK in one transaction. It takes an
-- ACCESS EXCLUSIVE lock on rowlease_tool_execution and reads every row once.

ALTER TABLE rowlease_tool_execution
    DROP CONSTRAINT rowlease_tool_execution_status_ck,
    ADD CONSTRAINT rowlease_tool_execution_status_ck CHECK (status IN ('processing', 'started', 'success', 'error'));
