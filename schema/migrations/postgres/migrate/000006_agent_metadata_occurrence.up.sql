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
