-- Migration 5, up: the journal of steps, one row per step (postgres).
--
-- rowlease_step holds the steps a request's runs record (request.Run.Step),
-- one row per step, appended with the request's lease: recording a step
-- costs the same whatever its position. The steps that migration 4's
-- column holds are moved into it, in order, and the column is dropped.
-- rowlease_request gets deaths (how often a run of the request died
-- without giving its lease back: the service's resume counts these, not
-- graceful give-backs), rowlease_tool_execution step_seq (how many steps
-- its run had recorded when it made the call: a failed request keeps the
-- steps that committed calls followed).
--
-- Stop the processes of the older version first: they write the column
-- this migration drops. It takes an ACCESS EXCLUSIVE lock on
-- rowlease_request and rowlease_tool_execution and reads every request
-- row with steps once. Run it once; on tables that already have the new
-- columns (schema.Apply upgraded them before you adopted the migrations)
-- it fails (column "steps" does not exist) and, run in one transaction as
-- golang-migrate and goose run it, changes nothing: record version 5 as
-- applied instead.

CREATE TABLE IF NOT EXISTS rowlease_step (
    request_id VARCHAR(36)  NOT NULL,
    seq        INTEGER      NOT NULL,
    name       VARCHAR(128) NOT NULL,
    output     TEXT         NOT NULL,
    generation BIGINT       NOT NULL,
    created_at TIMESTAMPTZ  NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT rowlease_step_pk PRIMARY KEY (request_id, seq)
);

ALTER TABLE rowlease_request
    ADD COLUMN IF NOT EXISTS deaths INTEGER NOT NULL DEFAULT 0;

ALTER TABLE rowlease_tool_execution
    ADD COLUMN IF NOT EXISTS step_seq INTEGER NULL;

INSERT INTO rowlease_step (request_id, seq, name, output, generation)
    SELECT r.id, e.ord - 1, e.v ->> 'name', (e.v -> 'output')::text, r.generation
    FROM rowlease_request r
    CROSS JOIN LATERAL json_array_elements(r.steps::json) WITH ORDINALITY AS e(v, ord)
    WHERE r.steps IS NOT NULL AND r.steps <> ''
    ON CONFLICT DO NOTHING;

ALTER TABLE rowlease_request
    DROP COLUMN IF EXISTS steps;
