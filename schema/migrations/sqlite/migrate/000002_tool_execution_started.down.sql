-- Migration 2, down: restores the tool-execution status CHECK of
-- migration 1 (sqlite) by the same rebuild as the up migration.
--
-- If a row has status 'started' the copy fails on the CHECK ("CHECK
-- constraint failed: rowlease_tool_execution_status_ck"), the transaction rolls
-- back and the table stays as it was: finish or delete those executions first.
-- The notes of the up migration on transactions, legacy_alter_table, foreign
-- keys and triggers hold here too.

CREATE TABLE rowlease_tool_execution_new (
    id              TEXT    NOT NULL,
    session_key     TEXT    NOT NULL,
    request_id      TEXT    NOT NULL,
    tool_name       TEXT    NOT NULL,
    arguments_hash  TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    status          TEXT    NOT NULL,
    holder          TEXT    NULL,
    token           TEXT    NULL,
    expires_at      INTEGER NULL,
    generation      INTEGER NOT NULL DEFAULT 0,
    result          TEXT    NULL,
    error           TEXT    NULL,
    created_at      INTEGER NOT NULL DEFAULT (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    updated_at      INTEGER NOT NULL DEFAULT (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    CONSTRAINT rowlease_tool_execution_pk PRIMARY KEY (id),
    CONSTRAINT rowlease_tool_execution_status_ck CHECK (status IN ('processing', 'success', 'error')),
    CONSTRAINT rowlease_tool_execution_time_ck CHECK (typeof(created_at) = 'integer' AND typeof(updated_at) = 'integer' AND typeof(expires_at) IN ('integer', 'null'))
);

INSERT INTO rowlease_tool_execution_new (id, session_key, request_id,
    tool_name, arguments_hash, idempotency_key, status, holder, token,
    expires_at, generation, result, error, created_at, updated_at)
    SELECT id, session_key, request_id, tool_name, arguments_hash,
           idempotency_key, status, holder, token, expires_at, generation,
           result, error, created_at, updated_at
    FROM rowlease_tool_execution;

DROP TABLE rowlease_tool_execution;

PRAGMA legacy_alter_table = ON;

ALTER TABLE rowlease_tool_execution_new RENAME TO rowlease_tool_execution;

PRAGMA legacy_alter_table = OFF;

CREATE UNIQUE INDEX rowlease_tool_execution_idem_uq
    ON rowlease_tool_execution (session_key, idempotency_key);

CREATE UNIQUE INDEX rowlease_tool_execution_call_uq
    ON rowlease_tool_execution (request_id, tool_name, arguments_hash);

CREATE INDEX rowlease_tool_execution_session_request_idx
    ON rowlease_tool_execution (session_key, request_id);
