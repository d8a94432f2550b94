-- Migration 6, up: a request's agent and metadata, and identical tool
-- calls counted by occurrence (mysql).
--
-- rowlease_request gets agent (the name of the agent that runs the
-- request: a Runner resumes only the requests whose agent it has) and
-- metadata (JSON the client sent with the message: the user, attachments'
-- references, model settings). rowlease_tool_execution gets occurrence:
-- the n-th identical call (same request, tool and canonical arguments) of
-- a run is its own effect, numbered from 0, and the call's unique key
-- takes it in. Rows of earlier versions are occurrence 0.
--
-- Run it once; on tables that already have the columns (schema.Apply
-- upgraded them before you adopted the migrations) it fails with error
-- 1060 (duplicate column) and changes nothing: record version 6 as
-- applied instead.

ALTER TABLE rowlease_request
    ADD COLUMN agent VARCHAR(128) NULL,
    ADD COLUMN metadata LONGTEXT NULL;

ALTER TABLE rowlease_tool_execution
    ADD COLUMN occurrence INT NOT NULL DEFAULT 0,
    DROP INDEX rowlease_tool_execution_call_uq,
    ADD UNIQUE KEY rowlease_tool_execution_call_uq (request_id, tool_name, arguments_hash, occurrence);
