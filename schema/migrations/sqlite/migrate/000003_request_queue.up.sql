-- Migration 3, up: queued and interrupted requests, retention (sqlite).
--
-- SQLite cannot alter a CHECK, so rowlease_request is rebuilt as
-- migration 2 rebuilds rowlease_tool_execution (see its notes on
-- transactions, legacy_alter_table, foreign keys and triggers, which hold
-- here too), with the columns the queue, interrupts and retention need
-- (content, queue_seq, on_busy, interrupted_by), the queue key UNIQUE
-- (session_key, queue_seq), an index on (status, updated_at), and a CHECK
-- that lets a request be 'queued', 'interrupted' or 'expired'.
--
-- The first statement adds content to the old table, so that the copy
-- keeps it: it fails ("duplicate column name: content"), and the whole file
-- with it, on a table that already has the new columns (schema.Apply
-- upgraded it before you adopted the migrations) instead of copying that
-- table without them. Record version 3 as applied instead.

ALTER TABLE rowlease_request ADD COLUMN content TEXT NULL;

CREATE TABLE rowlease_request_new (
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
    CONSTRAINT rowlease_request_pk PRIMARY KEY (id),
    CONSTRAINT rowlease_request_session_queue_uq UNIQUE (session_key, queue_seq),
    CONSTRAINT rowlease_request_status_ck CHECK (status IN ('queued', 'processing', 'success', 'error', 'interrupted', 'expired')),
    CONSTRAINT rowlease_request_time_ck CHECK (typeof(created_at) = 'integer' AND typeof(updated_at) = 'integer' AND typeof(expires_at) IN ('integer', 'null'))
);

INSERT INTO rowlease_request_new (id, session_key, client_request_id,
    fingerprint, status, holder, token, expires_at, generation, reply, result,
    error, created_at, updated_at, content)
    SELECT id, session_key, client_request_id, fingerprint, status, holder,
           token, expires_at, generation, reply, result, error, created_at,
           updated_at, content
    FROM rowlease_request;

DROP TABLE rowlease_request;

PRAGMA legacy_alter_table = ON;

ALTER TABLE rowlease_request_new RENAME TO rowlease_request;

PRAGMA legacy_alter_table = OFF;

CREATE UNIQUE INDEX rowlease_request_session_client_uq
    ON rowlease_request (session_key, client_request_id);

CREATE INDEX rowlease_request_status_updated_idx
    ON rowlease_request (status, updated_at);
