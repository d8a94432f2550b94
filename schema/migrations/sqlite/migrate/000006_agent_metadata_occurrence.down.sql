-- Migration 6, down (sqlite).
--
-- Down restores the tables of migration 5: agent and metadata are dropped
-- from rowlease_request, occurrence from rowlease_tool_execution, and the
-- call's unique index is (request_id, tool_name, arguments_hash) again.
-- That index has room for one row per call, so the rows of the second and
-- later identical calls of a run (occurrence > 0) are deleted first; the
-- first call's row (occurrence 0) stays, and the version before migration
-- 6 takes an identical call for that one. Stop the processes of the newer
-- version first: they write the columns this migration drops.

DELETE FROM rowlease_tool_execution
    WHERE occurrence > 0;

DROP INDEX IF EXISTS rowlease_tool_execution_call_uq;

ALTER TABLE rowlease_tool_execution DROP COLUMN occurrence;

CREATE UNIQUE INDEX rowlease_tool_execution_call_uq
    ON rowlease_tool_execution (request_id, tool_name, arguments_hash);

ALTER TABLE rowlease_request DROP COLUMN metadata;

ALTER TABLE rowlease_request DROP COLUMN agent;
