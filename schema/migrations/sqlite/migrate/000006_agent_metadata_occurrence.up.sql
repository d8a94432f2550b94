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
