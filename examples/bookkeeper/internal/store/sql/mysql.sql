-- bookkeeper ledger tables for MySQL 8.0.16+ and MariaDB 10.6+.
--
-- Amounts are DECIMAL(15,2); dates DATE; timestamps DATETIME(6) in UTC.
-- Strings are utf8mb4 with the binary collation, like the rowlease tables.
-- Keys are declared inside CREATE TABLE (MySQL has no CREATE INDEX IF NOT
-- EXISTS).
--
-- One statement per ';' at the end of a line; comments on lines of their own.

CREATE TABLE IF NOT EXISTS ledger (
    id         VARCHAR(36)  NOT NULL,
    name       VARCHAR(191) NOT NULL,
    created_at DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS category (
    id       VARCHAR(32) NOT NULL,
    name     VARCHAR(64) NOT NULL,
    name_en  VARCHAR(64) NOT NULL,
    kind     VARCHAR(16) NULL,
    position INT         NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY category_name_uq (name),
    UNIQUE KEY category_name_en_uq (name_en),
    CONSTRAINT category_kind_ck CHECK (kind IN ('income', 'expense'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS chat_session (
    id         VARCHAR(191) NOT NULL,
    ledger_id  VARCHAR(36)  NOT NULL,
    created_at DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (id),
    KEY chat_session_ledger_idx (ledger_id),
    CONSTRAINT chat_session_ledger_fk FOREIGN KEY (ledger_id) REFERENCES ledger (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS ledger_transaction (
    id          VARCHAR(36)   NOT NULL,
    ledger_id   VARCHAR(36)   NOT NULL,
    session_key VARCHAR(191)  NOT NULL,
    request_id  VARCHAR(36)   NOT NULL,
    type        VARCHAR(16)   NOT NULL,
    amount      DECIMAL(15,2) NOT NULL,
    category_id VARCHAR(32)   NOT NULL,
    note        VARCHAR(500)  NOT NULL DEFAULT '',
    occur_date  DATE          NOT NULL,
    created_at  DATETIME(6)   NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (id),
    UNIQUE KEY ledger_transaction_request_uq (request_id),
    KEY ledger_transaction_ledger_date_idx (ledger_id, occur_date),
    KEY ledger_transaction_session_idx (session_key),
    CONSTRAINT ledger_transaction_type_ck CHECK (type IN ('income', 'expense')),
    CONSTRAINT ledger_transaction_amount_ck CHECK (amount > 0),
    CONSTRAINT ledger_transaction_ledger_fk FOREIGN KEY (ledger_id) REFERENCES ledger (id),
    CONSTRAINT ledger_transaction_category_fk FOREIGN KEY (category_id) REFERENCES category (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS chat_message (
    id                VARCHAR(36)  NOT NULL,
    session_key       VARCHAR(191) NOT NULL,
    seq               BIGINT       NOT NULL,
    client_request_id VARCHAR(191) NOT NULL,
    request_id        VARCHAR(36)  NOT NULL,
    role              VARCHAR(16)  NOT NULL,
    content           MEDIUMTEXT   NOT NULL,
    created_at        DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (id),
    UNIQUE KEY chat_message_dedupe_uq (session_key, client_request_id, role),
    UNIQUE KEY chat_message_seq_uq (session_key, seq),
    CONSTRAINT chat_message_role_ck CHECK (role IN ('user', 'assistant'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- A journal of the model rounds the agent's runs went through, written
-- beside each round's step with -intx-beside-step (see agent.Config).
CREATE TABLE IF NOT EXISTS model_round (
    id          VARCHAR(36)  NOT NULL,
    session_key VARCHAR(191) NOT NULL,
    request_id  VARCHAR(36)  NOT NULL,
    round_no    INT          NOT NULL,
    created_at  DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (id),
    KEY model_round_request_idx (request_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
