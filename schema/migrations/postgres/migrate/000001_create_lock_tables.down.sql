-- Migration 1, down: drops the rowlease lock tables and their data (postgres).

DROP TABLE IF EXISTS rowlease_tool_execution;
DROP TABLE IF EXISTS rowlease_request;
DROP TABLE IF EXISTS rowlease_session;
