-- bookkeeper ledger tables for PostgreSQL 13+.
--
-- Amounts are NUMERIC(15,2); dates DATE; timestamps timestamptz.
--
-- One statement per ';' at the end of a line; comments on lines of their own.

CREATE TABLE IF NOT EXISTS ledger (
    id         VARCHAR(36)  NOT NULL,
    name       VARCHAR(191) NOT NULL,
    created_at TIMESTAMPTZ  NOT NULL DEFAULT now(),
    CONSTRAINT ledger_pk PRIMARY KEY (id)
);

CREATE TABLE IF NOT EXISTS category (
    id       VARCHAR(32) NOT NULL,
    name     VARCHAR(64) NOT NULL,
    name_en  VARCHAR(64) NOT NULL,
    kind     VARCHAR(16) NULL,
    position INTEGER     NOT NULL,
    CONSTRAINT category_pk PRIMARY KEY (id),
    CONSTRAINT category_name_uq UNIQUE (name),
    CONSTRAINT category_name_en_uq UNIQUE (name_en),
    CONSTRAINT category_kind_ck CHECK (kind IN ('income', 'expense'))
);

CREATE TABLE IF NOT EXISTS chat_session (
    id         VARCHAR(191) NOT NULL,
    ledger_id  VARCHAR(36)  NOT NULL,
    created_at TIMESTAMPTZ  NOT NULL DEFAULT now(),
    CONSTRAINT chat_session_pk PRIMARY KEY (id),
    CONSTRAINT chat_session_ledger_fk FOREIGN KEY (ledger_id) REFERENCES ledger (id)
);

CREATE INDEX IF NOT EXISTS chat_session_ledger_idx
    ON chat_session (ledger_id);

CREATE TABLE IF NOT EXISTS ledger_transaction (
    id          VARCHAR(36)   NOT NULL,
    ledger_id   VARCHAR(36)   NOT NULL,
    session_key VARCHAR(191)  NOT NULL,
    request_id  VARCHAR(36)   NOT NULL,
    type        VARCHAR(16)   NOT NULL,
    amount      NUMERIC(15,2) NOT NULL,
    category_id VARCHAR(32)   NOT NULL,
    note        VARCHAR(500)  NOT NULL DEFAULT '',
    occur_date  DATE          NOT NULL,
    created_at  TIMESTAMPTZ   NOT NULL DEFAULT now(),
    CONSTRAINT ledger_transaction_pk PRIMARY KEY (id),
    CONSTRAINT ledger_transaction_request_uq UNIQUE (request_id),
    CONSTRAINT ledger_transaction_type_ck CHECK (type IN ('income', 'expense')),
    CONSTRAINT ledger_transaction_amount_ck CHECK (amount > 0),
    CONSTRAINT ledger_transaction_ledger_fk FOREIGN KEY (ledger_id) REFERENCES ledger (id),
    CONSTRAINT ledger_transaction_category_fk FOREIGN KEY (category_id) REFERENCES category (id)
);

CREATE INDEX IF NOT EXISTS ledger_transaction_ledger_date_idx
    ON ledger_transaction (ledger_id, occur_date);

CREATE INDEX IF NOT EXISTS ledger_transaction_session_idx
    ON ledger_transaction (session_key);

CREATE TABLE IF NOT EXISTS chat_message (
    id                VARCHAR(36)  NOT NULL,
    session_key       VARCHAR(191) NOT NULL,
    seq               BIGINT       NOT NULL,
    client_request_id VARCHAR(191) NOT NULL,
    request_id        VARCHAR(36)  NOT NULL,
    role              VARCHAR(16)  NOT NULL,
    content           TEXT         NOT NULL,
    created_at        TIMESTAMPTZ  NOT NULL DEFAULT now(),
    CONSTRAINT chat_message_pk PRIMARY KEY (id),
    CONSTRAINT chat_message_dedupe_uq UNIQUE (session_key, client_request_id, role),
    CONSTRAINT chat_message_seq_uq UNIQUE (session_key, seq),
    CONSTRAINT chat_message_role_ck CHECK (role IN ('user', 'assistant'))
);

-- A journal of the model rounds the agent's runs went through, written
-- beside each round's step with -intx-beside-step (see agent.Config).
CREATE TABLE IF NOT EXISTS model_round (
    id          VARCHAR(36)  NOT NULL,
    session_key VARCHAR(191) NOT NULL,
    request_id  VARCHAR(36)  NOT NULL,
    round_no    INTEGER      NOT NULL,
    created_at  TIMESTAMPTZ  NOT NULL DEFAULT now(),
    CONSTRAINT model_round_pk PRIMARY KEY (id)
);

CREATE INDEX IF NOT EXISTS model_round_request_idx
    ON model_round (request_id);
