-- Code generated from the golang-migrate files 000007_request_wait.{up,down}.sql. DO NOT EDIT.

-- +goose Up
-- Migration 7, up: requests that wait for a person's answer (sqlite).
--
-- A request may be 'waiting' (its run stopped to wait for a person's
-- answer; no lease is held meanwhile), and it gets the columns of the open
-- question: wait_name (the name its agent gave it), wait_question (its
-- JSON), wait_seq (the position in the request's steps at which the answer
-- is recorded) and wait_until (its deadline, by the database clock, in
-- microseconds like the other times; NULL: none), all four NULL unless the
-- request is waiting. rowlease_request_time_ck takes in wait_until.
--
-- SQLite cannot alter a CHECK, so rowlease_request is rebuilt as
-- migrations 2, 3 and 4 rebuild their tables (see the notes of migration 2
-- on transactions, legacy_alter_table, foreign keys and triggers, which
-- hold here too), keeping every column of migration 6.
--
-- The first statements add the four columns to the old table, so that the
-- copy keeps them: the first one fails ("duplicate column name:
-- wait_name"), and the whole file with it, on a table that already has
-- them (schema.Apply upgraded it before you adopted the migrations)
-- instead of copying that table without them. Record version 7 as applied
-- instead.

ALTER TABLE rowlease_request ADD COLUMN wait_name TEXT NULL;

ALTER TABLE rowlease_request ADD COLUMN wait_question TEXT NULL;

ALTER TABLE rowlease_request ADD COLUMN wait_seq INTEGER NULL;

ALTER TABLE rowlease_request ADD COLUMN wait_until INTEGER NULL;

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

INSERT INTO rowlease_request_new (id, session_key, client_request_id,
    fingerprint, status, holder, token, expires_at, generation, reply, result,
    error, created_at, updated_at, content, queue_seq, on_busy, interrupted_by,
    deaths, agent, metadata, wait_name, wait_question, wait_seq, wait_until)
    SELECT id, session_key, client_request_id, fingerprint, status, holder,
           token, expires_at, generation, reply, result, error, created_at,
           updated_at, content, queue_seq, on_busy, interrupted_by, deaths,
           agent, metadata, wait_name, wait_question, wait_seq, wait_until
    FROM rowlease_request;

DROP TABLE rowlease_request;

PRAGMA legacy_alter_table = ON;

ALTER TABLE rowlease_request_new RENAME TO rowlease_request;

PRAGMA legacy_alter_table = OFF;

CREATE UNIQUE INDEX rowlease_request_session_client_uq
    ON rowlease_request (session_key, client_request_id);

CREATE INDEX rowlease_request_status_updated_idx
    ON rowlease_request (status, updated_at);

-- +goose Down
-- Migration 7, down (sqlite).
--
-- Down rebuilds the request table of migration 6: its status CHECK and
-- time CHECK, without the columns wait_name, wait_question, wait_seq and
-- wait_until (the open questions are lost). While a request is 'waiting'
-- the copy fails on the CHECK ("CHECK constraint failed:
-- rowlease_request_status_ck"), the transaction rolls back and the table
-- stays as it was. Answer, cancel or delete those first.

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
    deaths            INTEGER NOT NULL DEFAULT 0,
    agent             TEXT    NULL,
    metadata          TEXT    NULL,
    CONSTRAINT rowlease_request_pk PRIMARY KEY (id),
    CONSTRAINT rowlease_request_session_queue_uq UNIQUE (session_key, queue_seq),
    CONSTRAINT rowlease_request_status_ck CHECK (status IN ('queued', 'processing', 'success', 'error', 'interrupted', 'cancelled', 'expired')),
    CONSTRAINT rowlease_request_time_ck CHECK (typeof(created_at) = 'integer' AND typeof(updated_at) = 'integer' AND typeof(expires_at) IN ('integer', 'null'))
);

INSERT INTO rowlease_request_new (id, session_key, client_request_id,
    fingerprint, status, holder, token, expires_at, generation, reply, result,
    error, created_at, updated_at, content, queue_seq, on_busy, interrupted_by,
    deaths, agent, metadata)
    SELECT id, session_key, client_request_id, fingerprint, status, holder,
           token, expires_at, generation, reply, result, error, created_at,
           updated_at, content, queue_seq, on_busy, interrupted_by, deaths,
           agent, metadata
    FROM rowlease_request;

DROP TABLE rowlease_request;

PRAGMA legacy_alter_table = ON;

ALTER TABLE rowlease_request_new RENAME TO rowlease_request;

PRAGMA legacy_alter_table = OFF;

CREATE UNIQUE INDEX rowlease_request_session_client_uq
    ON rowlease_request (session_key, client_request_id);

CREATE INDEX rowlease_request_status_updated_idx
    ON rowlease_request (status, updated_at);
