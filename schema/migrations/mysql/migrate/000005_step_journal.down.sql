-- Migration 5, down (mysql).
--
-- Down restores the tables of migration 4: the steps of each request go
-- back into its steps column, a JSON array of {"name": …, "output": …}
-- objects in seq order (each output as the JSON text it is, not as a
-- string), and rowlease_step, deaths and step_seq are dropped. A request
-- without steps keeps a NULL column. Stop the processes of the newer
-- version first: they write the table this migration drops.
--
-- The array is put together with GROUP_CONCAT … ORDER BY seq, which both
-- MySQL and MariaDB order (MySQL's JSON_ARRAYAGG takes no ORDER BY); its
-- result is cut at group_concat_max_len, which this session raises first
-- (a request's steps fitted in one statement's packet before migration 5,
-- and fit again). The statements run one at a time, each committed: if
-- one fails, fix the cause and run the rest of the file by hand.

ALTER TABLE rowlease_request
    ADD COLUMN steps LONGTEXT NULL;

SET SESSION group_concat_max_len = 4294967295;

UPDATE rowlease_request r
    JOIN (SELECT request_id,
                 CONCAT('[', GROUP_CONCAT(CONCAT('{"name":', JSON_QUOTE(name), ',"output":', output, '}')
                     ORDER BY seq SEPARATOR ','), ']') AS steps
          FROM rowlease_step
          GROUP BY request_id) s ON s.request_id = r.id
    SET r.steps = s.steps;

DROP TABLE IF EXISTS rowlease_step;

ALTER TABLE rowlease_request
    DROP COLUMN deaths;

ALTER TABLE rowlease_tool_execution
    DROP COLUMN step_seq;
