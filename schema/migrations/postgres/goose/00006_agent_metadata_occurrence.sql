-- Code generated from the golang-migrate files 000006_agent_metadata_occurrence.{up,down}.sql. DO NOT EDIT.

-- +goose Up
-- Migration 6, up: a request's agent and metadata, and identical tool
-- calls counted by occurrence (postgres).
--
-- rowlease_request gets agent (the name of the agent that runs the
-- request: a Runner resumes only the requests whose agent it has) and
-- metadata (JSON the client sent with the message: the user, attachments'
-- references, model settings). rowlease_tool_execution gets occurrence:
-- the n-th identical call (same request, tool and canonical arguments) of
-- a run is its own effect, numbered from 0, and the call's unique key
-- takes it in. Rows of earlier versions are occurrence 0.

ALTER TABLE rowlease_request
    ADD COLUMN IF NOT EXISTS agent VARCHAR(128) NULL,
    ADD COLUMN IF NOT EXISTS metadata TEXT NULL;

ALTER TABLE rowlease_tool_execution
    ADD COLUMN IF NOT EXISTS occurrence INTEGER NOT NULL DEFAULT 0,
    DROP CONSTRAINT rowlease_tool_execution_call_uq,
    ADD CONSTRAINT rowlease_tool_execution_call_uq UNIQUE (request_id, tool_name, arguments_hash, occurrence);

-- +goose Down
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
