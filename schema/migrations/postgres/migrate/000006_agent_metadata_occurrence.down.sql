-- Migration 6, down (postgres).
--
-- Down restores the tables of migration 5: agent and metadata are dropped
-- from rowlease_request, occurrence from rowlease_tool_execution, and the
-- call's unique key is (request_id, tool_name, arguments_hash) again.
-- That key has room for one row per call, so the rows of the second and
-- later identical calls of a run (occurrence > 0) are deleted first; the
-- first call's row (occurrence 0) stays, and the version before migration
-- 6 takes an identical call for that one. Stop the processes of the newer
-- version first: they write the columns this migration drops.

DELETE FROM rowlease_tool_execution
    WHERE occurrence > 0;

ALTER TABLE rowlease_tool_execution
    DROP CONSTRAINT rowlease_tool_execution_call_uq,
    ADD CONSTRAINT rowlease_tool_execution_call_uq UNIQUE (request_id, tool_name, arguments_hash),
    DROP COLUMN occurrence;

ALTER TABLE rowlease_request
    DROP COLUMN IF EXISTS agent,
    DROP COLUMN IF EXISTS metadata;
