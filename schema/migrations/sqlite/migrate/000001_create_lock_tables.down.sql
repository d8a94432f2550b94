-- Same statements as schema/sql/sqlite.sql (keep them in step); TestMigrationsMatchDDL fails if they drift.
-- golang-migrate down migration: drops the rowlease lock tables and their data (sqlite).

DROP TABLE IF EXISTS rowlease_tool_execution;
DROP TABLE IF EXISTS rowlease_request;
DROP TABLE IF EXISTS rowlease_session;
