// Package sqlite is the driver of SQLite 3.35+ (RETURNING is required;
// through modernc.org/sqlite or mattn/go-sqlite3) for the lease engine:
// see package driver for the contract.
//
// It guarantees: double-quoted identifiers; the clock as integer
// microseconds since the Unix epoch, read from julianday('now') (whole
// milliseconds: Caps.ClockResolution is 1ms); ? placeholders; RETURNING;
// ConfirmPut as one INSERT … SELECT … WHERE EXISTS upsert; row lists as
// VALUES (SQLite takes a row value IN only from a subquery); errors read
// from the extended result code, through a Code() int method
// (modernc.org/sqlite) or the ExtendedCode field of mattn/go-sqlite3's
// Error (read by reflection: neither driver is linked) — constraint
// unique or primary key is a duplicate key, SQLITE_BUSY retryable,
// SQLITE_LOCKED transient; SQLITE_BUSY, _IOERR and _CANTOPEN, from a
// Code() int method, unavailable.
// Caps.SingleWriter tells engine that one writer at a time holds the
// whole database, so a flow's renewals are routed into its open fenced
// transaction (engine's FlowDB, which stays in engine: it handles
// engine's transactions, not text).
//
// It does not: lock rows in a read (no FOR UPDATE: a transaction's first
// write locks the database), join writes in one statement, write
// AcquireCreate in one statement, or send a busy victim again (the busy
// timeout already waited).
//
// How it fails: its Probe reads the busy timeout and the journal mode,
// and logs a warning for a zero busy timeout or a journal mode other than
// WAL; it never refuses. Its error is the database's.
package sqlite
