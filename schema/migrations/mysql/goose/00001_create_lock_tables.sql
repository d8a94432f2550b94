-- Code generated from the golang-migrate files 000001_create_lock_tables.{up,down}.sql. DO NOT EDIT.

-- +goose Up
-- Migration 1, up: creates the rowlease lock tables (mysql).

CREATE TABLE IF NOT EXISTS rowlease_session (
    session_key VARCHAR(191) NOT NULL,
    holder      VARCHAR(191) NULL,
    token       VARCHAR(36)  NULL,
    expires_at  DATETIME(6)  NULL,
    generation  BIGINT       NOT NULL DEFAULT 0,
    created_at  DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    updated_at  DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (session_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS rowlease_request (
    id                VARCHAR(36)  NOT NULL,
    session_key       VARCHAR(191) NOT NULL,
    client_request_id VARCHAR(191) NOT NULL,
    fingerprint       VARCHAR(64)  NOT NULL,
    status            VARCHAR(16)  NOT NULL,
    holder            VARCHAR(191) NULL,
    token             VARCHAR(36)  NULL,
    expires_at        DATETIME(6)  NULL,
    generation        BIGINT       NOT NULL DEFAULT 0,
    reply             LONGTEXT     NULL,
    result            LONGTEXT     NULL,
    error             TEXT         NULL,
    created_at        DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    updated_at        DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (id),
    UNIQUE KEY rowlease_request_session_client_uq (session_key, client_request_id),
    CONSTRAINT rowlease_request_status_ck CHECK (status IN ('processing', 'success', 'error'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

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
    expires_at      DATETIME(6)  NULL,
    generation      BIGINT       NOT NULL DEFAULT 0,
    result          LONGTEXT     NULL,
    error           TEXT         NULL,
    created_at      DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    updated_at      DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (id),
    UNIQUE KEY rowlease_tool_execution_idem_uq (session_key, idempotency_key),
    UNIQUE KEY rowlease_tool_execution_call_uq (request_id, tool_name, arguments_hash),
    KEY rowlease_tool_execution_session_request_idx (session_key, request_id),
    CONSTRAINT rowlease_tool_execution_status_ck CHECK (status IN ('processing', 'success', 'error'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
-- Migration 1, down: drops the rowlease lock tables and their data (mysql).

DROP TABLE IF EXISTS rowlease_tool_execution;
DROP TABLE IF EXISTS rowlease_request;
DROP TABLE IF EXISTS rowlease_session;
