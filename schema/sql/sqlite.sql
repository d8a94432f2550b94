-- rowlease lock tables for SQLite 3.35+ (the library uses RETURNING).
--
-- Code generated from migrations/sqlite/migrate by schema/internal/sqlgen. DO NOT EDIT.
--
-- Times are INTEGER microseconds since the Unix epoch (UTC). The defaults
-- have millisecond resolution (julianday('now') is read once per statement).
-- The *_time_ck constraints reject anything but integers in the time columns,
-- so a time value that a driver would store as text fails loudly instead of
-- comparing wrongly. TEXT columns have no length limit on SQLite.
--
-- The queue key (session_key, queue_seq) of rowlease_request is a table
-- constraint, not a CREATE UNIQUE INDEX of its own: on the table of an
-- earlier version, which has no queue_seq until Apply upgrades it
-- (migration 3), such a statement would fail before the upgrade runs.
--
-- A statement ends at a line that ends in ';'; schema.Apply runs them one
-- at a time.

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
    content           TEXT    NULL,
    queue_seq         INTEGER NULL,
    on_busy           TEXT    NULL,
    interrupted_by    TEXT    NULL,
    deaths            INTEGER NOT NULL DEFAULT 0,
    agent             TEXT    NULL,
    metadata          TEXT    NULL,
    wait_name         TEXT    NULL,
    wait_question     TEXT    NULL,
    wait_seq          INTEGER NULL,
    wait_until        INTEGER NULL,
    CONSTRAINT rowlease_request_pk PRIMARY KEY (id),
    CONSTRAINT rowlease_request_session_queue_uq UNIQUE (session_key, queue_seq),
    CONSTRAINT rowlease_request_status_ck CHECK (status IN ('queued', 'processing', 'waiting', 'success', 'error', 'interrupted', 'cancelled', 'expired')),
    CONSTRAINT rowlease_request_time_ck CHECK (typeof(created_at) = 'integer' AND typeof(updated_at) = 'integer' AND typeof(expires_at) IN ('integer', 'null') AND typeof(wait_until) IN ('integer', 'null'))
);

CREATE UNIQUE INDEX IF NOT EXISTS rowlease_request_session_client_uq
    ON rowlease_request (session_key, client_request_id);

CREATE INDEX IF NOT EXISTS rowlease_request_status_updated_idx
    ON rowlease_request (status, updated_at);

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
    step_seq        INTEGER NULL,
    occurrence      INTEGER NOT NULL DEFAULT 0,
    CONSTRAINT rowlease_tool_execution_pk PRIMARY KEY (id),
    CONSTRAINT rowlease_tool_execution_status_ck CHECK (status IN ('processing', 'started', 'success', 'error')),
    CONSTRAINT rowlease_tool_execution_time_ck CHECK (typeof(created_at) = 'integer' AND typeof(updated_at) = 'integer' AND typeof(expires_at) IN ('integer', 'null'))
);

CREATE UNIQUE INDEX IF NOT EXISTS rowlease_tool_execution_idem_uq
    ON rowlease_tool_execution (session_key, idempotency_key);

CREATE UNIQUE INDEX IF NOT EXISTS rowlease_tool_execution_call_uq
    ON rowlease_tool_execution (request_id, tool_name, arguments_hash, occurrence);

CREATE INDEX IF NOT EXISTS rowlease_tool_execution_session_request_idx
    ON rowlease_tool_execution (session_key, request_id);

CREATE TABLE IF NOT EXISTS rowlease_step (
    request_id TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    name       TEXT    NOT NULL,
    output     TEXT    NOT NULL,
    generation INTEGER NOT NULL,
    created_at INTEGER NOT NULL DEFAULT (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    CONSTRAINT rowlease_step_pk PRIMARY KEY (request_id, seq)
);
