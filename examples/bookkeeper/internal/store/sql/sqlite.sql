-- bookkeeper ledger tables for SQLite 3.
--
-- Amounts are TEXT holding a canonical decimal with exactly two places
-- ("35.00"), the same text the DECIMAL(15,2) columns of MySQL and
-- PostgreSQL give back, so the Go code reads and writes amounts the same way
-- on every dialect. Sum them in Go (as integer cents), not with SQL SUM.
-- Dates are TEXT 'YYYY-MM-DD'; timestamps TEXT in UTC with milliseconds
-- ('2024-05-01T12:00:00.000Z'), which sort as they compare.
--
-- One statement per ';' at the end of a line; comments on lines of their own.

CREATE TABLE IF NOT EXISTS ledger (
    id         TEXT NOT NULL,
    name       TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT ledger_pk PRIMARY KEY (id)
);

CREATE TABLE IF NOT EXISTS category (
    id       TEXT    NOT NULL,
    name     TEXT    NOT NULL,
    name_en  TEXT    NOT NULL,
    kind     TEXT    NULL,
    position INTEGER NOT NULL,
    CONSTRAINT category_pk PRIMARY KEY (id),
    CONSTRAINT category_name_uq UNIQUE (name),
    CONSTRAINT category_name_en_uq UNIQUE (name_en),
    CONSTRAINT category_kind_ck CHECK (kind IN ('income', 'expense'))
);

CREATE TABLE IF NOT EXISTS chat_session (
    id         TEXT NOT NULL,
    ledger_id  TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT chat_session_pk PRIMARY KEY (id),
    CONSTRAINT chat_session_ledger_fk FOREIGN KEY (ledger_id) REFERENCES ledger (id)
);

CREATE TABLE IF NOT EXISTS ledger_transaction (
    id          TEXT NOT NULL,
    ledger_id   TEXT NOT NULL,
    session_key TEXT NOT NULL,
    request_id  TEXT NOT NULL,
    type        TEXT NOT NULL,
    amount      TEXT NOT NULL,
    category_id TEXT NOT NULL,
    note        TEXT NOT NULL DEFAULT '',
    occur_date  TEXT NOT NULL,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT ledger_transaction_pk PRIMARY KEY (id),
    CONSTRAINT ledger_transaction_request_uq UNIQUE (request_id),
    CONSTRAINT ledger_transaction_type_ck CHECK (type IN ('income', 'expense')),
    CONSTRAINT ledger_transaction_amount_ck CHECK (typeof(amount) = 'text' AND amount GLOB '[0-9]*.[0-9][0-9]' AND amount NOT GLOB '*[^0-9.]*' AND CAST(amount AS REAL) > 0),
    CONSTRAINT ledger_transaction_date_ck CHECK (occur_date GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]'),
    CONSTRAINT ledger_transaction_ledger_fk FOREIGN KEY (ledger_id) REFERENCES ledger (id),
    CONSTRAINT ledger_transaction_category_fk FOREIGN KEY (category_id) REFERENCES category (id)
);

CREATE INDEX IF NOT EXISTS ledger_transaction_ledger_date_idx
    ON ledger_transaction (ledger_id, occur_date);

CREATE INDEX IF NOT EXISTS ledger_transaction_session_idx
    ON ledger_transaction (session_key);

CREATE TABLE IF NOT EXISTS chat_message (
    id                TEXT    NOT NULL,
    session_key       TEXT    NOT NULL,
    seq               INTEGER NOT NULL,
    client_request_id TEXT    NOT NULL,
    request_id        TEXT    NOT NULL,
    role              TEXT    NOT NULL,
    content           TEXT    NOT NULL,
    created_at        TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT chat_message_pk PRIMARY KEY (id),
    CONSTRAINT chat_message_dedupe_uq UNIQUE (session_key, client_request_id, role),
    CONSTRAINT chat_message_seq_uq UNIQUE (session_key, seq),
    CONSTRAINT chat_message_role_ck CHECK (role IN ('user', 'assistant'))
);

-- A journal of the model rounds the agent's runs went through, written
-- beside each round's step with -intx-beside-step (see agent.Config).
CREATE TABLE IF NOT EXISTS model_round (
    id          TEXT    NOT NULL,
    session_key TEXT    NOT NULL,
    request_id  TEXT    NOT NULL,
    round_no    INTEGER NOT NULL,
    created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT model_round_pk PRIMARY KEY (id)
);

CREATE INDEX IF NOT EXISTS model_round_request_idx
    ON model_round (request_id);
