-- Migration 6, down (mysql).
--
-- Down restores the tables of migration 5: agent and metadata are dropped
-- from rowlease_request, occurrence from rowlease_tool_execution, and the
-- call's unique key is (request_id, tool_name, arguments_hash) again.
-- That key has room for one row per call, so the rows of the second and
-- later identical calls of a run (occurrence > 0) are deleted first; the
-- first call's row (occurrence 0) stays, and the version before migration
-- 6 takes an identical call for that one. Stop the processes of the newer
-- version first: they write the columns this migration drops.
--
-- The statements run one at a time, each committed: if one fails, fix the
-- cause and run the rest of the file by hand.

DELETE FROM rowlease_tool_execution
    WHERE occurrence > 0;

ALTER TABLE rowlease_tool_execution
    DROP INDEX rowlease_tool_execution_call_uq,
    ADD UNIQUE KEY rowlease_tool_execution_call_uq (request_id, tool_name, arguments_hash),
    DROP COLUMN occurrence;

ALTER TABLE rowlease_request
    DROP COLUMN agent,
    DROP COLUMN metadata;
