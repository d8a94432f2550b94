-- Code generated from the golang-migrate files 000001_create_lock_tables.{up,down}.sql. DO NOT EDIT.

-- +goose Up
-- Migration 1, up: creates the rowlease lock tables (sqlite).

CREATE TABLE IF NOT EXISTS rowlease_session (
    session_key TEXT    NOT NULL,
    holder      TEXT    NULL,
    token       TEXT    NULL,
    expires_at  INTEGER NULL,
    generation  INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL DEFAULT (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    updated_at  INTEGER NOT NULL DEFAULT (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    CONSTRAINT rowlease_session_pk PRIMARY KEY (session_key),
    CONSTRAINT rowlease_session_time_ck CHECK (typeof(created_at) = 'integer' AND typeof(updated_at) = 'integer' AND typeof(expires_at) IN ('integer', 'null'))
);

CREATE TABLE IF NOT EXISTS rowlease_request (
    id                TEXT    NOT NULL,
    session_key       TEXT    NOT NULL,
    client_request_id TEXT    NOT NULL,
    fingerprint       TEXT    NOT NULL,
    status            TEXT    NOT NULL,
    holder            TEXT    NULL,
    token             TEXT    NULL,
    expires_at        INTEGER NULL,
    generation        INTEGER NOT NULL DEFAULT 0,
    reply             TEXT    NULL,
    result            TEXT    NULL,
    error             TEXT    NULL,
    created_at        INTEGER NOT NULL DEFAULT (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    updated_at        INTEGER NOT NULL DEFAULT (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    CONSTRAINT rowlease_request_pk PRIMARY KEY (id),
    CONSTRAINT rowlease_request_status_ck CHECK (status IN ('processing', 'success', 'error')),
    CONSTRAINT rowlease_request_time_ck CHECK (typeof(created_at) = 'integer' AND typeof(updated_at) = 'integer' AND typeof(expires_at) IN ('integer', 'null'))
);

CREATE UNIQUE INDEX IF NOT EXISTS rowlease_request_session_client_uq
    ON rowlease_request (session_key, client_request_id);

CREATE TABLE IF NOT EXISTS rowlease_tool_execution (
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

CREATE UNIQUE INDEX IF NOT EXISTS rowlease_tool_execution_idem_uq
    ON rowlease_tool_execution (session_key, idempotency_key);

CREATE UNIQUE INDEX IF NOT EXISTS rowlease_tool_execution_call_uq
    ON rowlease_tool_execution (request_id, tool_name, arguments_hash);

CREATE INDEX IF NOT EXISTS rowlease_tool_execution_session_request_idx
    ON rowlease_tool_execution (session_key, request_id);

-- +goose Down
-- Migration 1, down: drops the rowlease lock tables and their data (sqlite).

DROP TABLE IF EXISTS rowlease_tool_execution;
DROP TABLE IF EXISTS rowlease_request;
DROP TABLE IF EXISTS rowlease_session;
