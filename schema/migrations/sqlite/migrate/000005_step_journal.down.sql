-- Migration 5, down (sqlite).
--
-- Down restores the tables of migration 4: the steps of each request go
-- back into its steps column, a JSON array of {"name": …, "output": …}
-- objects in seq order (each output as the JSON it is, not as a string),
-- and rowlease_step, deaths and step_seq are dropped. A request without
-- steps keeps a NULL column. Stop the processes of the newer version
-- first: they write the table this migration drops.
--
-- The steps are aggregated from a subquery ordered by seq: SQLite feeds an
-- aggregate the rows of such a subquery in its order (it does not flatten
-- a subquery with ORDER BY into an aggregate query).

ALTER TABLE rowlease_request ADD COLUMN steps TEXT NULL;

UPDATE rowlease_request
    SET steps = (
        SELECT json_group_array(json_object('name', s.name, 'output', json(s.output)))
        FROM (SELECT name, output FROM rowlease_step
              WHERE request_id = rowlease_request.id
              ORDER BY seq) AS s)
    WHERE id IN (SELECT request_id FROM rowlease_step);

DROP TABLE IF EXISTS rowlease_step;

ALTER TABLE rowlease_request DROP COLUMN deaths;

ALTER TABLE rowlease_tool_execution DROP COLUMN step_seq;
