-- Code generated from the golang-migrate files 000003_request_queue.{up,down}.sql. DO NOT EDIT.

-- +goose Up
-- Migration 3, up: queued and interrupted requests, retention (mysql).
--
-- One ALTER TABLE adds the columns and keys the queue, interrupts and retention
-- need (content, queue_seq, on_busy, interrupted_by; UNIQUE (session_key,
-- queue_seq); an index on (status, updated_at)) and lets a request be
-- 'queued', 'interrupted' or 'expired'. MariaDB 10.6+, MySQL 8.0.19+ (DROP
-- CONSTRAINT). The server checks every row against the new CHECK; MariaDB
-- copies the table to do so and blocks writes to it meanwhile.
--
-- Run it once. On a table that already has the new columns (schema.Apply
-- upgraded it before you adopted the migrations) it fails with error 1060
-- (duplicate column) and changes nothing: record version 3 as applied
-- instead (golang-migrate force 3; goose: a row in its version table).

ALTER TABLE rowlease_request
    ADD COLUMN content LONGTEXT NULL,
    ADD COLUMN queue_seq BIGINT NULL,
    ADD COLUMN on_busy VARCHAR(16) NULL,
    ADD COLUMN interrupted_by VARCHAR(191) NULL,
    ADD UNIQUE KEY rowlease_request_session_queue_uq (session_key, queue_seq),
    ADD KEY rowlease_request_status_updated_idx (status, updated_at),
    DROP CONSTRAINT rowlease_request_status_ck,
    ADD CONSTRAINT rowlease_request_status_ck CHECK (status IN ('queued', 'processing', 'success', 'error', 'interrupted', 'expired'));

-- +goose Down
-- Migration 3, down (mysql).
--
-- Down restores the request table of migration 2: the CHECK of migration 1,
-- without the new columns (their values are lost) and keys. The server
-- checks every row against the re-added CHECK: while a request is 'queued',
-- 'interrupted' or 'expired' the statement fails (MySQL error 3819, MariaDB
-- error 4025) and the table stays as it was. Finish, or delete, those first.

ALTER TABLE rowlease_request
    DROP CONSTRAINT rowlease_request_status_ck,
    ADD CONSTRAINT rowlease_request_status_ck CHECK (status IN ('processing', 'success', 'error')),
    DROP INDEX rowlease_request_status_updated_idx,
    DROP INDEX rowlease_request_session_queue_uq,
    DROP COLUMN interrupted_by,
    DROP COLUMN on_busy,
    DROP COLUMN queue_seq,
    DROP COLUMN content;
