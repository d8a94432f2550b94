-- Migration 2, up: a tool execution may have status 'started' (mysql).
--
-- One ALTER TABLE drops and re-adds the CHECK (MariaDB 10.6+, MySQL 8.0.19+:
-- earlier MySQL 8.0 releases have no DROP CONSTRAINT). The server checks every
-- row against the new CHECK; MariaDB copies the table to do so (ALGORITHM=COPY
-- is the only algorithm it allows here) and blocks writes to it meanwhile.

ALTER TABLE rowlease_tool_execution
    DROP CONSTRAINT rowlease_tool_execution_status_ck,
    ADD CONSTRAINT rowlease_tool_execution_status_ck CHECK (status IN ('processing', 'started', 'success', 'error'));
