package schema

import (
	"fmt"
	"strings"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/sqlitedsn"
	"github.com/rowlease/rowlease/lease"
)

// SQLiteDSN is the DSN of a SQLite database file for modernc.org/sqlite
// (driver name "sqlite") with the settings rowlease needs: WAL (readers
// and the writer do not block each other), a 10 s busy timeout (a second
// writer waits instead of failing with SQLITE_BUSY) and _txlock=immediate
// (a transaction takes the write lock at BEGIN, so two transactions that
// both write cannot deadlock on the upgrade of a read lock):
//
//	db, err := sql.Open("sqlite", schema.SQLiteDSN("app.db"))
//	// file:app.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate
//
// Options change the busy timeout and add synchronous=NORMAL and foreign
// keys, in that order, before _txlock:
//
//	schema.SQLiteDSN("app.db", schema.SQLiteBusyTimeout(20*time.Second),
//		schema.SQLiteSynchronousNormal(), schema.SQLiteForeignKeys())
//	// file:app.db?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)&_txlock=immediate
//
// It only builds a string: package schema links no driver. path is put
// into a URI filename as it is, so it must not contain '?' or '#'. For
// mattn/go-sqlite3 (driver name "sqlite3", cgo), which spells the same
// settings otherwise, use
//
//	"file:" + path + "?_busy_timeout=10000&_journal_mode=WAL&_txlock=immediate"
//
// Open every pool on the file with the same settings: lease.New's probe
// (see package lease, "SQLite") warns about a busy timeout of 0 and a
// journal mode other than WAL.
func SQLiteDSN(path string, opts ...SQLiteOption) string {
	var s sqlitedsn.Settings
	for _, opt := range opts {
		opt(&s)
	}
	return sqlitedsn.Modernc(path, s)
}

// SQLiteOption changes one setting of the DSN that SQLiteDSN builds.
type SQLiteOption func(*sqliteSettings)

// sqliteSettings are the settings SQLiteOption values change.
type sqliteSettings = sqlitedsn.Settings

// SQLiteBusyTimeout sets how long a connection waits for another one's
// lock before it fails with SQLITE_BUSY, in whole milliseconds (default
// 10 s). A d below one millisecond keeps the default: a busy timeout of 0
// is what lease.New's probe warns about.
func SQLiteBusyTimeout(d time.Duration) SQLiteOption {
	return func(s *sqliteSettings) { s.BusyTimeout = d }
}

// SQLiteSynchronousNormal sets synchronous=NORMAL: in WAL mode SQLite
// then syncs at checkpoints rather than at every commit, which is faster
// and cannot corrupt the database, but a power loss may undo the last
// commits (and with them leases taken or released). Without it the
// driver's default, FULL, applies.
func SQLiteSynchronousNormal() SQLiteOption {
	return func(s *sqliteSettings) { s.SynchronousNormal = true }
}

// SQLiteForeignKeys turns foreign-key enforcement on (SQLite's default is
// off), for tables of your own that declare foreign keys. rowlease's
// tables have none.
func SQLiteForeignKeys() SQLiteOption {
	return func(s *sqliteSettings) { s.ForeignKeys = true }
}

// LeaseColumnsDDL returns the statements that add the lease columns of t
// (Holder, Token, ExpiresAt and Generation) to t's table, an existing
// table of yours, with the types the shipped tables give them on dialect:
// holder VARCHAR(191) and token VARCHAR(36), NULL (binary collation on
// MySQL); expires_at DATETIME(6) on MySQL/MariaDB, TIMESTAMPTZ on
// PostgreSQL, INTEGER on SQLite, NULL; generation BIGINT (INTEGER on
// SQLite) NOT NULL DEFAULT 0. Existing rows come out free, at generation
// 0. Run the statements in order, once: a column that exists already
// makes the database refuse the statement. On MySQL/MariaDB and
// PostgreSQL it is one ALTER TABLE (all or nothing); SQLite adds one
// column per statement.
//
// t is the same spec given to lease.New (or, through Config.Table and
// Config.Columns, to session.New): its Key is a column the table has
// already, its primary key or a unique one. Its optional State and
// UpdatedAt columns are not added: they name columns of your table.
//
// An unknown dialect gives an error wrapping ErrUnknownDialect; the zero
// Table an error matching lease.ErrInvalid. The names are those
// lease.NewTable validated, quoted for dialect.
func LeaseColumnsDDL(dialect lease.Dialect, t lease.Table) ([]string, error) {
	if _, err := canonicalDialect(dialect); err != nil {
		return nil, err
	}
	if t.Name() == "" {
		return nil, &engine.ValidationError{Field: "table", Reason: "the zero Table (build it with lease.NewTable)"}
	}
	table := engine.QuotedTable(t, dialect)
	cols := t.Columns()
	var holder, token, expires, generation string
	switch dialect {
	case lease.MySQL:
		holder = "VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL"
		token = "VARCHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL"
		expires = "DATETIME(6) NULL"
		generation = "BIGINT NOT NULL DEFAULT 0"
	case lease.Postgres:
		holder, token, expires, generation = "VARCHAR(191) NULL", "VARCHAR(36) NULL", "TIMESTAMPTZ NULL", "BIGINT NOT NULL DEFAULT 0"
	case lease.SQLite:
		holder, token, expires, generation = "TEXT NULL", "TEXT NULL", "INTEGER NULL", "INTEGER NOT NULL DEFAULT 0"
	}
	var adds []string
	for _, c := range []struct{ name, typ string }{
		{cols.Holder, holder}, {cols.Token, token}, {cols.ExpiresAt, expires}, {cols.Generation, generation},
	} {
		q, err := engine.QuoteIdent(dialect, c.name)
		if err != nil {
			return nil, err
		}
		adds = append(adds, "ADD COLUMN "+q+" "+c.typ)
	}
	if dialect == lease.SQLite {
		// SQLite's ALTER TABLE adds one column at a time.
		out := make([]string, len(adds))
		for i, a := range adds {
			out[i] = fmt.Sprintf("ALTER TABLE %s %s", table, a)
		}
		return out, nil
	}
	return []string{fmt.Sprintf("ALTER TABLE %s %s", table, strings.Join(adds, ", "))}, nil
}
