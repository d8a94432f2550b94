-- Migration 5, down (postgres).
--
-- Down restores the tables of migration 4: the steps of each request go
-- back into its steps column, a JSON array of {"name": …, "output": …}
-- objects in seq order (each output as the JSON it is, not as a string;
-- json_agg writes its own spacing between the elements), and
-- rowlease_step, deaths and step_seq are dropped. A request without steps
-- keeps a NULL column. Stop the processes of the newer version first: they
-- write the table this migration drops.

ALTER TABLE rowlease_request
    ADD COLUMN IF NOT EXISTS steps TEXT NULL;

UPDATE rowlease_request r
    SET steps = s.steps
    FROM (SELECT request_id,
                 json_agg(json_build_object('name', name, 'output', output::json) ORDER BY seq)::text AS steps
          FROM rowlease_step
          GROUP BY request_id) s
    WHERE r.id = s.request_id;

DROP TABLE IF EXISTS rowlease_step;

ALTER TABLE rowlease_request
    DROP COLUMN IF EXISTS deaths;

ALTER TABLE rowlease_tool_execution
    DROP COLUMN IF EXISTS step_seq;
