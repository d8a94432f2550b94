-- Migration 3, down (sqlite).
--
-- Down rebuilds the request table of migration 2: the CHECK of migration 1,
-- without the new columns (their values are lost), key and index. While a
-- request is 'queued', 'interrupted' or 'expired' the copy fails on the
-- CHECK ("CHECK constraint failed: rowlease_request_status_ck"), the
-- transaction rolls back and the table stays as it was. Finish, or delete,
-- those first.

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
    CONSTRAINT rowlease_request_pk PRIMARY KEY (id),
    CONSTRAINT rowlease_request_status_ck CHECK (status IN ('processing', 'success', 'error')),
    CONSTRAINT rowlease_request_time_ck CHECK (typeof(created_at) = 'integer' AND typeof(updated_at) = 'integer' AND typeof(expires_at) IN ('integer', 'null'))
);

INSERT INTO rowlease_request_new (id, session_key, client_request_id,
    fingerprint, status, holder, token, expires_at, generation, reply, result,
    error, created_at, updated_at)
    SELECT id, session_key, client_request_id, fingerprint, status, holder,
           token, expires_at, generation, reply, result, error, created_at,
           updated_at
    FROM rowlease_request;

DROP TABLE rowlease_request;

PRAGMA legacy_alter_table = ON;

ALTER TABLE rowlease_request_new RENAME TO rowlease_request;

PRAGMA legacy_alter_table = OFF;

CREATE UNIQUE INDEX rowlease_request_session_client_uq
    ON rowlease_request (session_key, client_request_id);
