package engine

import (
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/rowlease/rowlease/internal/driver"
	"github.com/rowlease/rowlease/internal/driver/mysql"
	"github.com/rowlease/rowlease/internal/driver/postgres"
	"github.com/rowlease/rowlease/internal/driver/sqlite"
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

// String returns "mysql", "postgres" or "sqlite": its driver's name.
func (d Dialect) String() string {
	if d.valid() {
		return drivers[d].Name()
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

// drivers holds the driver of each Dialect, at its index. New picks a
// Lease's once; nothing else in this package asks which dialect a Lease
// speaks, it asks the driver.
var drivers = [...]driver.Driver{MySQL: mysql.Driver{}, Postgres: postgres.Driver{}, SQLite: sqlite.Driver{}}

func (d Dialect) valid() bool { return d > 0 && int(d) < len(drivers) }

// recognise asks each dialect's driver, in the order of drivers (MySQL's,
// PostgreSQL's, SQLite's), whether err holds one of its errors, and
// returns the first that does, with what it says err is.
func recognise(err error) (d Dialect, kind driver.ErrKind, ok bool) {
	for i, drv := range drivers {
		if drv == nil {
			continue
		}
		if k, ok := drv.Classify(err); ok {
			return Dialect(i), k, true
		}
	}
	return 0, driver.KindOther, false
}

// driver returns d's driver. An invalid Dialect (which New refuses) gets
// SQLite's: standard SQL's double-quoted identifiers and ? placeholders.
func (d Dialect) driver() driver.Driver {
	if d.valid() {
		return drivers[d]
	}
	return sqlite.Driver{}
}

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

// Now returns the SQL expression of the database clock of d in the lease
// column representation: UTC_TIMESTAMP(6) on MySQL (DATETIME(6) holding
// UTC), statement_timestamp() on PostgreSQL (timestamptz), integer
// microseconds since the Unix epoch on SQLite. Compare expires_at columns
// only with it.
func Now(d Dialect) string { return d.driver().Now() }

// NowPlus is Now of d plus micros (an SQL expression of a microsecond
// count), in the lease column representation.
func NowPlus(d Dialect, micros string) string { return d.driver().PlusMicros(d.driver().Now(), micros) }

// MicrosUntil is the number of whole microseconds from Now of d until the
// time expression t (negative once t has passed).
func MicrosUntil(d Dialect, t string) string { return d.driver().MicrosUntil(t) }

// Rebind rewrites ? placeholders as $1, $2, … for PostgreSQL and leaves
// them alone for MySQL and SQLite. The query must not contain a literal ?.
func (d Dialect) Rebind(q string) string { return d.driver().Rebind(q) }

// QuoteIdent quotes an identifier for d after validating it; it rejects
// anything but letters, digits and underscores (starting with a letter or
// underscore).
func QuoteIdent(d Dialect, ident string) (string, error) {
	if !validIdent(ident) {
		return "", invalid("identifier", fmt.Sprintf("%q is not a valid identifier", ident))
	}
	return d.driver().Quote(ident), nil
}

// SyncWait prefixes a MySQL-dialect statement of your own with MariaDB's
// SET STATEMENT wsrep_sync_wait, so that on a Galera cluster the node it
// runs on first applies every write the cluster committed before it: a
// read that sees the caller's own writes made through other nodes. Use it
// for your reads with Options.MultiPrimary (package request does, for its
// own); a single server has no wsrep_sync_wait to wait on, and needs none.
func SyncWait(q string) string { return mysql.Driver{}.Causal(q) }
