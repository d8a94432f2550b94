-- rowlease lock tables for PostgreSQL 13+ (tested on 15).
--
-- Code generated from migrations/postgres/migrate by schema/internal/sqlgen. DO NOT EDIT.
--
-- Times are TIMESTAMPTZ. Unique keys are named table constraints, so both
-- ON CONFLICT (columns) and ON CONFLICT ON CONSTRAINT <name> work, and
-- CREATE TABLE IF NOT EXISTS alone makes the file idempotent.
--
-- The queue key (session_key, queue_seq) of rowlease_request is a table
-- constraint: on the table of an earlier version, which has no queue_seq
-- until Apply upgrades it (migration 3), a CREATE UNIQUE INDEX of its own
-- would fail before the upgrade runs.
--
-- A statement ends at a line that ends in ';'; schema.Apply runs them one
-- at a time.

CREATE TABLE IF NOT EXISTS rowlease_session (
    session_key VARCHAR(191) NOT NULL,
    holder      VARCHAR(191) NULL,
    token       VARCHAR(36)  NULL,
    expires_at  TIMESTAMPTZ  NULL,
    generation  BIGINT       NOT NULL DEFAULT 0,
    created_at  TIMESTAMPTZ  NOT NULL DEFAULT clock_timestamp(),
    updated_at  TIMESTAMPTZ  NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT rowlease_session_pk PRIMARY KEY (session_key)
);

CREATE TABLE IF NOT EXISTS rowlease_request (
    id                VARCHAR(36)  NOT NULL,
    session_key       VARCHAR(191) NOT NULL,
    client_request_id VARCHAR(191) NOT NULL,
    fingerprint       VARCHAR(64)  NOT NULL,
    status            VARCHAR(16)  NOT NULL,
    holder            VARCHAR(191) NULL,
    token             VARCHAR(36)  NULL,
    expires_at        TIMESTAMPTZ  NULL,
    generation        BIGINT       NOT NULL DEFAULT 0,
    reply             TEXT         NULL,
    result            TEXT         NULL,
    error             TEXT         NULL,
    created_at        TIMESTAMPTZ  NOT NULL DEFAULT clock_timestamp(),
    updated_at        TIMESTAMPTZ  NOT NULL DEFAULT clock_timestamp(),
    content           TEXT         NULL,
    queue_seq         BIGINT       NULL,
    on_busy           VARCHAR(16)  NULL,
    interrupted_by    VARCHAR(191) NULL,
    deaths            INTEGER      NOT NULL DEFAULT 0,
    agent             VARCHAR(128) NULL,
    metadata          TEXT         NULL,
    wait_name         VARCHAR(128) NULL,
    wait_question     TEXT         NULL,
    wait_seq          INTEGER      NULL,
    wait_until        TIMESTAMPTZ  NULL,
    CONSTRAINT rowlease_request_pk PRIMARY KEY (id),
    CONSTRAINT rowlease_request_session_client_uq UNIQUE (session_key, client_request_id),
    CONSTRAINT rowlease_request_session_queue_uq UNIQUE (session_key, queue_seq),
    CONSTRAINT rowlease_request_status_ck CHECK (status IN ('queued', 'processing', 'waiting', 'success', 'error', 'interrupted', 'cancelled', 'expired'))
);

CREATE INDEX IF NOT EXISTS rowlease_request_status_updated_idx
    ON rowlease_request (status, updated_at);

CREATE TABLE IF NOT EXISTS rowlease_tool_execution (
    id              VARCHAR(36)  NOT NULL,
    session_key     VARCHAR(191) NOT NULL,
    request_id      VARCHAR(36)  NOT NULL,
    tool_name       VARCHAR(128) NOT NULL,
    arguments_hash  VARCHAR(64)  NOT NULL,
    idempotency_key VARCHAR(255) NOT NULL,
    status          VARCHAR(16)  NOT NULL,
    holder          VARCHAR(191) NULL,
    token           VARCHAR(36)  NULL,
    expires_at      TIMESTAMPTZ  NULL,
    generation      BIGINT       NOT NULL DEFAULT 0,
    result          TEXT         NULL,
    error           TEXT         NULL,
    created_at      TIMESTAMPTZ  NOT NULL DEFAULT clock_timestamp(),
    updated_at      TIMESTAMPTZ  NOT NULL DEFAULT clock_timestamp(),
    step_seq        INTEGER      NULL,
    occurrence      INTEGER      NOT NULL DEFAULT 0,
    CONSTRAINT rowlease_tool_execution_pk PRIMARY KEY (id),
    CONSTRAINT rowlease_tool_execution_idem_uq UNIQUE (session_key, idempotency_key),
    CONSTRAINT rowlease_tool_execution_call_uq UNIQUE (request_id, tool_name, arguments_hash, occurrence),
    CONSTRAINT rowlease_tool_execution_status_ck CHECK (status IN ('processing', 'started', 'success', 'error'))
);

CREATE INDEX IF NOT EXISTS rowlease_tool_execution_session_request_idx
    ON rowlease_tool_execution (session_key, request_id);

CREATE TABLE IF NOT EXISTS rowlease_step (
    request_id VARCHAR(36)  NOT NULL,
    seq        INTEGER      NOT NULL,
    name       VARCHAR(128) NOT NULL,
    output     TEXT         NOT NULL,
    generation BIGINT       NOT NULL,
    created_at TIMESTAMPTZ  NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT rowlease_step_pk PRIMARY KEY (request_id, seq)
);
