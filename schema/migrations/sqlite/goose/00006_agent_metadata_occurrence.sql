-- Code generated from the golang-migrate files 000006_agent_metadata_occurrence.{up,down}.sql. DO NOT EDIT.

-- +goose Up
-- Migration 6, up: a request's agent and metadata, and identical tool
-- calls counted by occurrence (sqlite).
--
-- rowlease_request gets agent (the name of the agent that runs the
-- request: a Runner resumes only the requests whose agent it has) and
-- metadata (JSON the client sent with the message: the user, attachments'
-- references, model settings). rowlease_tool_execution gets occurrence:
-- the n-th identical call (same request, tool and canonical arguments) of
-- a run is its own effect, numbered from 0, and the call's unique index
-- takes it in. Rows of earlier versions are occurrence 0.
--
-- Run it once; on tables that already have the columns (schema.Apply
-- upgraded them before you adopted the migrations) it fails ("duplicate
-- column name: agent"): record version 6 as applied instead.

ALTER TABLE rowlease_request ADD COLUMN agent TEXT NULL;

ALTER TABLE rowlease_request ADD COLUMN metadata TEXT NULL;

ALTER TABLE rowlease_tool_execution ADD COLUMN occurrence INTEGER NOT NULL DEFAULT 0;

DROP INDEX IF EXISTS rowlease_tool_execution_call_uq;

CREATE UNIQUE INDEX rowlease_tool_execution_call_uq
    ON rowlease_tool_execution (request_id, tool_name, arguments_hash, occurrence);

-- +goose Down
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
