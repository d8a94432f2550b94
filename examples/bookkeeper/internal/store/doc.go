// Package store is the bookkeeper's storage: opening the database named by
// the -db flag, the ledger tables next to rowlease's lock tables, and the
// queries the agent, the HTTP API and the demo run.
//
// # Tables
//
// Migrate applies, idempotently, rowlease's lock tables (schema.Apply) and
// the example's own tables, one DDL file per dialect (sql/*.sql):
//
//   - ledger: one book of accounts. Every chat session gets its own.
//   - category: the categories transactions are filed under, seeded from
//     llm.Categories, so every name the rule model sends exists. id is a
//     stable slug of the English name ("food", "side_job", "other").
//   - chat_session: a session (its id is the rowlease session key) and the
//     ledger it writes to. Its lock row lives in rowlease_session, created in
//     the same transaction (session.Locker.Create).
//   - ledger_transaction: one income or expense. UNIQUE (request_id): at most
//     one transaction per request (one user message), enforced by the
//     database as well as by the agent.
//   - chat_message: the conversation. UNIQUE (session_key,
//     client_request_id, role): a replay, a retry or a takeover never stores
//     a message twice. seq orders a session's messages; it is assigned while
//     the session's lease is held, so it never races.
//   - model_round: a journal of the model rounds the agent's runs went
//     through, one row per round and run, written only with
//     -intx-beside-step (agent.Config.InTxBesideStep), in a transaction
//     that may fail and roll back.
//
// # Amounts, dates and times
//
// Amounts are DECIMAL(15,2) on MySQL, NUMERIC(15,2) on PostgreSQL and TEXT
// with exactly two decimals ("35.00") on SQLite, so every dialect reads and
// writes the same text. The Go side works in integer cents (ParseAmount,
// FormatCents) and never in floating point. occur_date is DATE (TEXT
// 'YYYY-MM-DD' on SQLite); created_at is DATETIME(6)/timestamptz in UTC
// (TEXT with milliseconds on SQLite). All three are filled in the database
// or from validated strings, and read back through small Scanners that
// accept each driver's representation.
//
// # Databases
//
// ParseDSN understands "sqlite:PATH", "mysql://user:pass@host:port/db" and
// "postgres://…" URLs. SQLite files are opened in WAL mode with a busy
// timeout and BEGIN IMMEDIATE transactions (a transaction that will write
// takes the write lock first, which is also what makes rowlease's fences
// hold on SQLite) and with foreign keys enforced.
package store
