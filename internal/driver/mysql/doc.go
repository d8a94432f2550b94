// Package mysql is the driver of MySQL 8 and MariaDB 10.6+ (through
// go-sql-driver/mysql) for the lease engine: see package driver for the
// contract.
//
// It guarantees: backtick-quoted identifiers; the clock as
// UTC_TIMESTAMP(6) into DATETIME(6) columns holding UTC; ? placeholders;
// the generation handed back without RETURNING, as LAST_INSERT_ID(expr)
// in the OK packet (the engine makes it the first assignment, since MySQL
// evaluates SET left to right on updated values); joint writes as one
// multi-table UPDATE that makes all or none; MariaDB Galera's causal
// reads (SET STATEMENT wsrep_sync_wait=15 FOR …) for a multi-primary
// cluster; errors read from *mysql.MySQLError (1062 duplicate key, 1213
// retryable, 1205 transient; 1040, 1047, 1053, 1927 and ErrInvalidConn
// unavailable).
//
// It does not: write AcquireCreate or ConfirmPut in one statement (MySQL
// has no data-modifying WITH; the engine makes the writes one by one in a
// transaction), or join writes on a table named twice or a coarse expiry
// column.
//
// How it fails: its Probe reads information_schema on a go-sql-driver
// pool's own connection, with one argument, which also tells whether the
// DSN has interpolateParams=true (a warning, once per pool, when it has
// not and the Lease does not prepare everything); a missing column is
// driver.ErrColumnNotFound; any other failure is the server's error.
package mysql
