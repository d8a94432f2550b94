-- Code generated from the golang-migrate files 000002_tool_execution_started.{up,down}.sql. DO NOT EDIT.

-- +goose Up
-- Migration 2, up: a tool execution may have status 'started' (sqlite).
--
-- SQLite cannot alter a CHECK, so the table is rebuilt as the SQLite
-- documentation describes (lang_altertable.html, "Making Other Kinds Of Table
-- Schema Changes"): create the new table under a temporary name, copy the rows,
-- drop the old table (which drops its indexes and triggers), rename the new
-- one, recreate the indexes. Both tools run a migration file in one transaction
-- (golang-migrate's sqlite and sqlite3 drivers unless x-no-tx-wrap is set,
-- goose unless the file says NO TRANSACTION), so a failure leaves the old table
-- as it was; do not switch that off for this file.
--
-- legacy_alter_table is ON for the RENAME only: otherwise SQLite re-checks
-- every view and trigger of the schema during the rename, and a view of yours
-- that reads rowlease_tool_execution (dropped a moment before) fails it. With
-- it ON the view simply reads the new table. The setting is left OFF, its
-- default.
--
-- PRAGMA foreign_keys cannot change inside a transaction, so this file does not
-- touch it. The rowlease tables have no foreign keys; if a table of yours
-- references rowlease_tool_execution and foreign keys are enforced, DROP TABLE
-- deletes (or cascades to) the referencing rows: run this migration on a
-- connection with foreign_keys OFF. Triggers you created on
-- rowlease_tool_execution are dropped with the old table: create them again
-- afterwards (schema.Apply does that for you).

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
    CONSTRAINT rowlease_tool_execution_status_ck CHECK (status IN ('processing', 'started', 'success', 'error')),
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

-- +goose Down
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
