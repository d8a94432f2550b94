-- Migration 5, up: the journal of steps, one row per step (sqlite).
--
-- rowlease_step holds the steps a request's runs record (request.Run.Step),
-- one row per step, appended with the request's lease: recording a step
-- costs the same whatever its position. The steps that migration 4's
-- column holds are moved into it, in order, and the column is dropped
-- (SQLite 3.38+: the -> operator and DROP COLUMN). rowlease_request gets
-- deaths (how often a run of the request died without giving its lease
-- back: the service's resume counts these, not graceful give-backs),
-- rowlease_tool_execution step_seq (how many steps its run had recorded
-- when it made the call: a failed request keeps the steps that committed
-- calls followed).
--
-- Stop the processes of the older version first: they write the column
-- this migration drops. Run it once; on tables that already have the new
-- columns (schema.Apply upgraded them before you adopted the migrations)
-- it fails ("duplicate column name: deaths"): record version 5 as applied
-- instead.

CREATE TABLE IF NOT EXISTS rowlease_step (
    request_id TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    name       TEXT    NOT NULL,
    output     TEXT    NOT NULL,
    generation INTEGER NOT NULL,
    created_at INTEGER NOT NULL DEFAULT (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    CONSTRAINT rowlease_step_pk PRIMARY KEY (request_id, seq)
);

ALTER TABLE rowlease_request ADD COLUMN deaths INTEGER NOT NULL DEFAULT 0;

ALTER TABLE rowlease_tool_execution ADD COLUMN step_seq INTEGER NULL;

INSERT INTO rowlease_step (request_id, seq, name, output, generation)
    SELECT r.id, CAST(e.key AS INTEGER), e.value ->> '$.name', e.value -> '$.output', r.generation
    FROM rowlease_request r, json_each(r.steps) AS e
    WHERE r.steps IS NOT NULL AND r.steps <> '';

ALTER TABLE rowlease_request DROP COLUMN steps;
