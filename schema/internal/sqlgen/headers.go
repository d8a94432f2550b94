package sqlgen

// ddlHeaders are the comments at the top of each dialect's DDL file, the
// only part of it not taken from the migrations. The first line names the
// supported versions (the README names the same). {{generated}} stands
// for the "Code generated … DO NOT EDIT." line.
var ddlHeaders = map[string]string{
	"mysql": `-- rowlease lock tables for MySQL 8.0.16+ and MariaDB 10.6+.
--
-- {{generated}}
--
-- Times are DATETIME(6) holding UTC. Strings use utf8mb4 with the binary
-- collation utf8mb4_bin, so keys compare byte for byte (apart from MySQL's
-- PAD SPACE rule: trailing spaces are ignored in comparisons).
-- Unique keys are declared inside CREATE TABLE because MySQL 8 has no
-- CREATE INDEX IF NOT EXISTS.
--
-- A statement ends at a line that ends in ';'; schema.Apply runs them one
-- at a time.
`,
	"postgres": `-- rowlease lock tables for PostgreSQL 13+ (tested on 15).
--
-- {{generated}}
--
-- Times are TIMESTAMPTZ. Unique keys are named table constraints, so both
-- ON CONFLICT (columns) and ON CONFLICT ON CONSTRAINT <name> work, and
-- CREATE TABLE IF NOT EXISTS alone makes the file idempotent.
--
-- The queue key (session_key, queue_seq) of rowlease_request is a table
-- constraint: on the table of an earlier version, which has no queue_seq
-- until Apply upgrades it (migration 3), a CREATE UNIQUE INDEX of its own
-- would fail before the upgrade runs.
--
-- A statement ends at a line that ends in ';'; schema.Apply runs them one
-- at a time.
`,
	"sqlite": `-- rowlease lock tables for SQLite 3.35+ (the library uses RETURNING).
--
-- {{generated}}
--
-- Times are INTEGER microseconds since the Unix epoch (UTC). The defaults
-- have millisecond resolution (julianday('now') is read once per statement).
-- The *_time_ck constraints reject anything but integers in the time columns,
-- so a time value that a driver would store as text fails loudly instead of
-- comparing wrongly. TEXT columns have no length limit on SQLite.
--
-- The queue key (session_key, queue_seq) of rowlease_request is a table
-- constraint, not a CREATE UNIQUE INDEX of its own: on the table of an
-- earlier version, which has no queue_seq until Apply upgrades it
-- (migration 3), such a statement would fail before the upgrade runs.
--
-- A statement ends at a line that ends in ';'; schema.Apply runs them one
-- at a time.
`,
}
