-- Migration 5, up: the journal of steps, one row per step (mysql).
--
-- rowlease_step holds the steps a request's runs record (request.Run.Step),
-- one row per step, appended with the request's lease: recording a step
-- costs the same whatever its position. The steps that migration 4's
-- column holds are moved into it, in order (JSON_TABLE: MariaDB 10.6+,
-- MySQL 8.0.4+; MariaDB keeps each output's JSON text as it is, MySQL
-- writes it out again in its own spacing), and the column is dropped. rowlease_request gets deaths
-- (how often a run of the request died without giving its lease back:
-- the service's resume counts these, not graceful give-backs),
-- rowlease_tool_execution step_seq (how many steps its run had recorded
-- when it made the call: a failed request keeps the steps that committed
-- calls followed).
--
-- Stop the processes of the older version first: they write the column
-- this migration drops. Run it once; on tables that already have the new
-- columns (schema.Apply upgraded them before you adopted the migrations)
-- it fails with error 1060 (duplicate column): record version 5 as
-- applied instead (golang-migrate force 5; goose: a row in its version
-- table).

CREATE TABLE IF NOT EXISTS rowlease_step (
    request_id VARCHAR(36)  NOT NULL,
    seq        INT          NOT NULL,
    name       VARCHAR(128) NOT NULL,
    output     LONGTEXT     NOT NULL,
    generation BIGINT       NOT NULL,
    created_at DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (request_id, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

ALTER TABLE rowlease_request
    ADD COLUMN deaths INT NOT NULL DEFAULT 0;

ALTER TABLE rowlease_tool_execution
    ADD COLUMN step_seq INT NULL;

INSERT INTO rowlease_step (request_id, seq, name, output, generation)
    SELECT r.id, j.ord - 1, j.name, COALESCE(j.output, 'null'), r.generation
    FROM rowlease_request r,
    JSON_TABLE(r.steps, '$[*]' COLUMNS (
        ord FOR ORDINALITY,
        name VARCHAR(128) PATH '$.name',
        output JSON PATH '$.output'
    )) AS j
    WHERE r.steps IS NOT NULL AND r.steps <> '';

ALTER TABLE rowlease_request
    DROP COLUMN steps;
