package engine

import (
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Dialect names the SQL dialect a Lease speaks.
type Dialect int

// The supported dialects.
const (
	// MySQL is MySQL 8 and MariaDB 10.6+, through go-sql-driver/mysql.
	MySQL Dialect = iota + 1
	// Postgres is PostgreSQL 13+, through pgx (or any database/sql driver
	// that accepts $n placeholders).
	Postgres
	// SQLite is SQLite 3.35+ (RETURNING is required), through
	// modernc.org/sqlite or mattn/go-sqlite3.
	SQLite
)

// String returns "mysql", "postgres" or "sqlite".
func (d Dialect) String() string {
	switch d {
	case MySQL:
		return "mysql"
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

func (d Dialect) valid() bool { return d == MySQL || d == Postgres || d == SQLite }

// ParseDialect maps a database/sql driver name (as sqlx's DriverName returns
// it) or a dialect name to a Dialect: "mysql"; "postgres", "postgresql",
// "pgx", "pgx/v5"; "sqlite", "sqlite3".
func ParseDialect(name string) (Dialect, error) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "mysql", "mariadb":
		return MySQL, nil
	case "postgres", "postgresql", "pgx", "pgx/v5":
		return Postgres, nil
	case "sqlite", "sqlite3":
		return SQLite, nil
	}
	return 0, invalid("dialect", fmt.Sprintf("unknown driver or dialect name %q", name))
}

// DetectDialect finds the dialect of db: from DriverName() when db has it
// (*sqlx.DB, *sqlx.Tx), else from the type of the driver of a *sql.DB.
func DetectDialect(db any) (Dialect, error) {
	if n, ok := db.(interface{ DriverName() string }); ok {
		return ParseDialect(n.DriverName())
	}
	if sdb, ok := db.(*sql.DB); ok && sdb != nil {
		t := fmt.Sprintf("%T", sdb.Driver())
		switch {
		case strings.Contains(t, "mysql."):
			return MySQL, nil
		case strings.Contains(t, "stdlib."), strings.Contains(t, "pq."):
			return Postgres, nil
		case strings.Contains(t, "sqlite"):
			return SQLite, nil
		}
		return 0, invalid("dialect", "cannot tell the dialect of driver "+t)
	}
	return 0, invalid("dialect", fmt.Sprintf("cannot tell the dialect of %T; pass it explicitly", db))
}

// quote quotes one validated identifier part.
func (d Dialect) quote(id string) string {
	if d == MySQL {
		return "`" + id + "`"
	}
	return `"` + id + `"`
}

// now is the database-clock instant of the statement, in the column
// representation: DATETIME(6) UTC on MySQL, timestamptz on PostgreSQL,
// integer microseconds since the Unix epoch on SQLite.
//
// PostgreSQL uses statement_timestamp(), not now(): now() is the start of
// the transaction, so a lease taken late in a long transaction would get an
// expiry in the past.
func (d Dialect) now() string {
	switch d {
	case MySQL:
		return "UTC_TIMESTAMP(6)"
	case Postgres:
		return "statement_timestamp()"
	default:
		// SQLite's clock has millisecond resolution; 'now' is fixed for one
		// statement step.
		return "(CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)"
	}
}

// clockResolution is the step of the database clock as the lease statements
// read it: microseconds on MySQL and PostgreSQL, whole milliseconds on
// SQLite ('now' has millisecond resolution).
func (d Dialect) clockResolution() time.Duration {
	if d == SQLite {
		return time.Millisecond
	}
	return time.Microsecond
}

// plusMicros adds a microsecond count (an SQL expression) to a time expression.
func (d Dialect) plusMicros(t, micros string) string {
	switch d {
	case MySQL:
		return "(" + t + " + INTERVAL " + micros + " MICROSECOND)"
	case Postgres:
		return "(" + t + " + CAST(" + micros + " AS bigint) * INTERVAL '1 microsecond')"
	default:
		return "(" + t + " + " + micros + ")"
	}
}

// microsUntil is the number of whole microseconds from now until t.
func (d Dialect) microsUntil(t string) string {
	switch d {
	case MySQL:
		return "TIMESTAMPDIFF(MICROSECOND, " + d.now() + ", " + t + ")"
	case Postgres:
		return "CAST(FLOOR(EXTRACT(EPOCH FROM (" + t + " - " + d.now() + ")) * 1000000) AS bigint)"
	default:
		return "(" + t + " - " + d.now() + ")"
	}
}

// Now returns the SQL expression of the database clock in the lease column
// representation: UTC_TIMESTAMP(6) on MySQL (DATETIME(6) holding UTC),
// statement_timestamp() on PostgreSQL (timestamptz), integer microseconds
// since the Unix epoch on SQLite. Compare expires_at columns only with it.
func (d Dialect) Now() string { return d.now() }

// Rebind rewrites ? placeholders as $1, $2, … for PostgreSQL and leaves
// them alone for MySQL and SQLite. The query must not contain a literal ?.
func (d Dialect) Rebind(q string) string {
	if d != Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// Quote quotes an identifier after validating it; it rejects anything but
// letters, digits and underscores (starting with a letter or underscore).
func (d Dialect) Quote(ident string) (string, error) {
	if !validIdent(ident) {
		return "", invalid("identifier", fmt.Sprintf("%q is not a valid identifier", ident))
	}
	return d.quote(ident), nil
}

// causal prefixes a MySQL statement so that the node it runs on first
// applies every write the cluster committed before it (MariaDB Galera's
// wsrep_sync_wait, for this one statement: reads, updates, deletes and
// inserts). See Options.MultiPrimary.
func causal(q string) string { return "SET STATEMENT wsrep_sync_wait=15 FOR " + q }

// SyncWait prefixes a MySQL-dialect statement of your own with MariaDB's
// SET STATEMENT wsrep_sync_wait, so that on a Galera cluster the node it
// runs on first applies every write the cluster committed before it: a
// read that sees the caller's own writes made through other nodes. Use it
// for your reads with Options.MultiPrimary (package request does, for its
// own); a single server has no wsrep_sync_wait to wait on, and needs none.
func SyncWait(q string) string { return causal(q) }
