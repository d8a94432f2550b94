-- Migration 1, up: creates the rowlease lock tables (postgres).

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
    CONSTRAINT rowlease_request_pk PRIMARY KEY (id),
    CONSTRAINT rowlease_request_session_client_uq UNIQUE (session_key, client_request_id),
    CONSTRAINT rowlease_request_status_ck CHECK (status IN ('processing', 'success', 'error'))
);

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
    CONSTRAINT rowlease_tool_execution_pk PRIMARY KEY (id),
    CONSTRAINT rowlease_tool_execution_idem_uq UNIQUE (session_key, idempotency_key),
    CONSTRAINT rowlease_tool_execution_call_uq UNIQUE (request_id, tool_name, arguments_hash),
    CONSTRAINT rowlease_tool_execution_status_ck CHECK (status IN ('processing', 'success', 'error'))
);

CREATE INDEX IF NOT EXISTS rowlease_tool_execution_session_request_idx
    ON rowlease_tool_execution (session_key, request_id);
