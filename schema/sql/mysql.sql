-- rowlease lock tables for MySQL 8.0.16+ and MariaDB 10.6+.
--
-- Code generated from migrations/mysql/migrate by schema/internal/sqlgen. DO NOT EDIT.
--
-- Times are DATETIME(6) holding UTC. Strings use utf8mb4 with the binary
-- collation utf8mb4_bin, so keys compare byte for byte (apart from MySQL's
-- PAD SPACE rule: trailing spaces are ignored in comparisons).
-- Unique keys are declared inside CREATE TABLE because MySQL 8 has no
-- CREATE INDEX IF NOT EXISTS.
--
-- A statement ends at a line that ends in ';'; schema.Apply runs them one
-- at a time.

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
    content           LONGTEXT     NULL,
    queue_seq         BIGINT       NULL,
    on_busy           VARCHAR(16)  NULL,
    interrupted_by    VARCHAR(191) NULL,
    deaths            INT          NOT NULL DEFAULT 0,
    agent             VARCHAR(128) NULL,
    metadata          LONGTEXT     NULL,
    wait_name         VARCHAR(128) NULL,
    wait_question     LONGTEXT     NULL,
    wait_seq          INT          NULL,
    wait_until        DATETIME(6)  NULL,
    PRIMARY KEY (id),
    UNIQUE KEY rowlease_request_session_client_uq (session_key, client_request_id),
    UNIQUE KEY rowlease_request_session_queue_uq (session_key, queue_seq),
    KEY rowlease_request_status_updated_idx (status, updated_at),
    CONSTRAINT rowlease_request_status_ck CHECK (status IN ('queued', 'processing', 'waiting', 'success', 'error', 'interrupted', 'cancelled', 'expired'))
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
    step_seq        INT          NULL,
    occurrence      INT          NOT NULL DEFAULT 0,
    PRIMARY KEY (id),
    UNIQUE KEY rowlease_tool_execution_idem_uq (session_key, idempotency_key),
    UNIQUE KEY rowlease_tool_execution_call_uq (request_id, tool_name, arguments_hash, occurrence),
    KEY rowlease_tool_execution_session_request_idx (session_key, request_id),
    CONSTRAINT rowlease_tool_execution_status_ck CHECK (status IN ('processing', 'started', 'success', 'error'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS rowlease_step (
    request_id VARCHAR(36)  NOT NULL,
    seq        INT          NOT NULL,
    name       VARCHAR(128) NOT NULL,
    output     LONGTEXT     NOT NULL,
    generation BIGINT       NOT NULL,
    created_at DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (request_id, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
