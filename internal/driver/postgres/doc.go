// Package postgres is the driver of PostgreSQL 13+ (through pgx, or any
// database/sql driver that takes $n placeholders) for the lease engine:
// see package driver for the contract.
//
// It guarantees: double-quoted identifiers; the clock as
// statement_timestamp() (not now(), the start of the transaction) into
// timestamptz columns; $n placeholders, one number per name; RETURNING;
// one statement, of data-modifying WITH parts, for joint writes (the
// writes that match are made), AcquireCreate and
// AcquireCreateUnless (the insert selected from the acquire's row: both or
// neither, even on a pool), and ConfirmPut (the upsert selected from the
// confirm); errors read through a SQLState() method (23505 duplicate key,
// 40001 and 40P01 retryable; class 08, 25006, 53300, 57P01-57P03 and pgx's
// "conn closed" and "read only connection" unavailable), so that it links
// no PostgreSQL driver.
//
// It does not: know a multi-primary cluster (Causal returns its input).
//
// How it fails: its Probe reads pg_attribute for the expiry column's type
// and typmod, the table found with to_regclass through the search path;
// a missing table or column is driver.ErrColumnNotFound; any other
// failure is the server's error.
package postgres
