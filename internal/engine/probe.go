package engine

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
)

// The first-use check (see the package doc, "First use"): once per Lease
// and database handle, before the first operation's own statement, one
// statement reads what the Lease must know of the database:
//
//   - MySQL: the expiry column's type and DATETIME_PRECISION from
//     information_schema.COLUMNS; on a go-sql-driver pool, sent through
//     the driver connection with one argument, which also tells whether
//     the DSN has interpolateParams=true (see probeMySQLRaw);
//   - PostgreSQL: its type and typmod from pg_attribute (the table found
//     with to_regclass, through the search path, as the lease statements
//     find it);
//   - SQLite: PRAGMA busy_timeout and journal_mode.
//
// The statement uses functions or tables only its own dialect has, so it
// succeeding proves the dialect; when it fails, the driver error's type
// says which database answered.

// maxProbed bounds the handles one Lease remembers; handles beyond it are
// not checked.
const maxProbed = 64

// maxProbeAttempts bounds how often a check that fails with a driver error
// (not a refusal) is tried again on the same handle.
const maxProbeAttempts = 3

// unpooled is the one slot shared by every handle whose pool the Lease
// cannot see: a *sql.Tx, a *sql.Conn, a *sqlx.Tx, a wrapper.
type unpooled struct{}

// probeEntry is the check of one handle: done once it ran (or was given
// up), with err the refusal it found, if any.
type probeEntry struct {
	done     atomic.Bool
	mu       sync.Mutex
	err      error
	attempts int
}

type probeCache struct {
	m sync.Map // key (a pool, or unpooled{}) -> *probeEntry
	n atomic.Int64
}

// probeTarget picks the handle a check is remembered by and run on: a
// pool (*sql.DB, *sqlx.DB, a FlowDB's pool) for itself, and a pool's
// connection (OnConn) as its pool, run on the connection; anything else under
// the one unpooled slot, checked on the handle given.
func probeTarget(db DB) (key any, on DB) {
	if f, ok := db.(*FlowDB); ok && f != nil {
		db = f.pool
	}
	if c, ok := db.(pooledConn); ok {
		// A connection of a pool's (OnConn): the pool's check, run on it.
		if t := reflect.TypeOf(c.pool); t.Kind() == reflect.Pointer {
			return c.pool, db
		}
		return unpooled{}, db
	}
	if r, ok := db.(routedTx); ok && r.pool != nil {
		// A renewal routed into a flow's SQLite transaction: its pool was
		// checked (or is checked now, outside the transaction).
		db = r.pool
	}
	if p, ok := db.(pool); ok && !isNil(db) {
		if t := reflect.TypeOf(p); t.Kind() == reflect.Pointer {
			return p, db
		}
	}
	return unpooled{}, db
}

// Check runs the first-use check of db now (see the package doc, "First
// use"), unless it already ran for db's handle: at most one statement,
// once. Every operation does this by itself before its first statement
// on a handle; call Check at start-up to find a misconfiguration before
// the first request does, or to check a pool before handing the Lease
// only transactions. It returns the *ValidationError (ErrInvalid) that
// every operation on db would return, or nil. A driver error of the check
// itself is returned too, and the check is tried again next time.
func Check[K Key](ctx context.Context, l *Lease[K], db DB) error {
	if err := l.checkDB(db); err != nil {
		return err
	}
	return l.probe(ctx, db, true)
}

// probe runs the first-use check for db's handle once. It returns a
// refusal (a *ValidationError), or nil: a check that failed with a driver
// error lets the operation go on (its own statement reports the database's
// error) and is tried again on a later one, up to maxProbeAttempts times.
// With report, that driver error is returned instead.
func (l *Lease[K]) probe(ctx context.Context, db DB, report bool) error {
	if l.skipCheck {
		return nil
	}
	key, on := probeTarget(db)
	v, ok := l.probes.m.Load(key)
	if !ok {
		if l.probes.n.Load() >= maxProbed {
			return nil
		}
		var loaded bool
		if v, loaded = l.probes.m.LoadOrStore(key, &probeEntry{}); !loaded {
			l.probes.n.Add(1)
		}
	}
	e := v.(*probeEntry)
	if e.done.Load() {
		return e.err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done.Load() {
		return e.err
	}
	refusal, err := l.runProbe(ctx, on)
	if err != nil {
		// Every failure counts, the context's end among them: a check that
		// cannot finish within the operations' deadlines must not cost
		// each of them a statement for ever.
		e.attempts++
		if e.attempts >= maxProbeAttempts {
			e.done.Store(true)
		}
		if report {
			return fmt.Errorf("lease: checking the database: %w", err)
		}
		return nil
	}
	e.err = refusal
	e.done.Store(true)
	return refusal
}

// errNotFound is the check's failure when the catalog does not show the
// expiry column (the table not created yet, or not readable): the dialect
// is confirmed, the column is looked for again on a later operation.
var errNotFound = errors.New("lease: the expiry column is not in the catalog")

// runProbe sends the dialect's check statement on db and judges it: a
// refusal, or a driver error when the check itself could not run.
func (l *Lease[K]) runProbe(ctx context.Context, db DB) (refusal, err error) {
	if d, ok := driverDialect(db); ok && d != l.dialect {
		return l.wrongDialect(d), nil
	}
	switch l.dialect {
	case MySQL:
		var schema, typ sql.NullString
		var prec sql.NullInt64
		found, interpolates, raw := l.probeMySQLRaw(ctx, db, &typ, &prec)
		switch {
		case raw == nil && interpolates:
			err = nil
			if !found {
				err = sql.ErrNoRows
			}
		default:
			if raw == nil && !interpolates && l.prepare != PrepareAlways {
				l.warnInterpolate(ctx, db)
			}
			err = db.QueryRowContext(ctx, l.b.probeMySQL()).Scan(&schema, &typ, &prec)
		}
		if errors.Is(err, sql.ErrNoRows) {
			return nil, errNotFound
		}
		if err == nil {
			return l.judgeColumn(typ.String, prec, mysqlPrecision), nil
		}
	case Postgres:
		var typ sql.NullString
		var mod sql.NullInt64
		err = db.QueryRowContext(ctx, l.b.probePostgres()).Scan(&typ, &mod)
		if err == nil && !typ.Valid {
			return nil, errNotFound
		}
		if err == nil {
			return l.judgeColumn(typ.String, mod, postgresPrecision), nil
		}
	default:
		var busy int64
		var journal string
		err = db.QueryRowContext(ctx, probeSQLite).Scan(&busy, &journal)
		if err == nil {
			l.warnSQLite(ctx, busy, journal)
			return nil, nil
		}
	}
	if d, ok := errDialect(err); ok && d != l.dialect {
		return l.wrongDialect(d), nil
	}
	return nil, err
}

func (l *Lease[K]) wrongDialect(d Dialect) error {
	return invalid("dialect", fmt.Sprintf("the Lease was made for %s but the database is %s: pass lease.%s to lease.New (or use DetectDialect)",
		l.dialect, d, map[Dialect]string{MySQL: "MySQL", Postgres: "Postgres", SQLite: "SQLite"}[d]))
}

// driverDialect is the dialect that the driver of db says, when db shows
// its driver (*sql.DB, *sqlx.DB) and the driver is one DetectDialect knows.
func driverDialect(db DB) (Dialect, bool) {
	if _, ok := db.(interface{ DriverName() string }); !ok {
		if _, ok := db.(interface{ Driver() driver.Driver }); !ok {
			return 0, false
		}
	}
	d, err := DetectDialect(db)
	return d, err == nil
}

// errDialect is the dialect whose driver returned err, told by its type:
// *mysql.MySQLError, an error with SQLState() (pgx, lib/pq), a SQLite
// error (modernc.org/sqlite, mattn/go-sqlite3).
func errDialect(err error) (Dialect, bool) {
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		return MySQL, true
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		return Postgres, true
	}
	if _, ok := sqliteCode(err); ok {
		return SQLite, true
	}
	return 0, false
}

// errNoRaw: the handle is not a go-sql-driver pool whose connection the
// check can use directly; the check runs as on any handle.
var errNoRaw = errors.New("lease: no go-sql-driver connection")

// probeMySQLRaw runs the MySQL check statement, with one argument that
// changes nothing (AND 1 = ?), on a connection of a go-sql-driver pool
// through database/sql's Conn.Raw, to learn whether the pool's DSN has
// interpolateParams=true without a round trip of its own: with it off, the
// driver declines a statement with arguments before sending anything
// (driver.ErrSkip, after which database/sql would prepare it), and the
// check is then sent as usual (without arguments: no prepare); with it
// on, the driver runs the statement in one round trip and its row is the
// check's answer. raw is errNoRaw when db is not such a pool (a
// transaction, a *sql.Conn, a wrapper, another driver), or the driver's
// error.
func (l *Lease[K]) probeMySQLRaw(ctx context.Context, db DB, typ *sql.NullString, prec *sql.NullInt64) (found, interpolates bool, raw error) {
	p, ok := db.(interface {
		Driver() driver.Driver
		Conn(context.Context) (*sql.Conn, error)
	})
	if !ok || isNil(db) {
		return false, false, errNoRaw
	}
	switch p.Driver().(type) {
	case *mysql.MySQLDriver, mysql.MySQLDriver:
	default:
		return false, false, errNoRaw
	}
	conn, err := p.Conn(ctx)
	if err != nil {
		return false, false, err
	}
	defer conn.Close()
	raw = conn.Raw(func(dc any) error {
		q, ok := dc.(driver.QueryerContext)
		if !ok {
			return errNoRaw
		}
		rows, err := q.QueryContext(ctx, l.b.probeMySQL()+" AND 1 = ?", []driver.NamedValue{{Ordinal: 1, Value: int64(1)}})
		if errors.Is(err, driver.ErrSkip) {
			return nil
		}
		if err != nil {
			return err
		}
		defer rows.Close()
		interpolates = true
		dest := make([]driver.Value, len(rows.Columns()))
		if err := rows.Next(dest); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if len(dest) != 3 {
			return fmt.Errorf("lease: the check read %d columns", len(dest))
		}
		found = true
		if err := typ.Scan(dest[1]); err != nil {
			return err
		}
		if b, ok := dest[2].([]byte); ok { // text protocol: digits
			dest[2] = string(b)
		}
		return prec.Scan(dest[2])
	})
	return found, interpolates, raw
}

// interpolateWarned holds the pools already warned about (bounded as the
// checks are): the warning is once per pool, not once per Lease.
var interpolateWarned struct {
	m sync.Map
	n atomic.Int64
}

// warnInterpolate logs, once per pool, that the pool's DSN leaves
// interpolateParams off.
func (l *Lease[K]) warnInterpolate(ctx context.Context, db DB) {
	if interpolateWarned.n.Load() >= maxProbed {
		return
	}
	if _, loaded := interpolateWarned.m.LoadOrStore(db, struct{}{}); loaded {
		return
	}
	interpolateWarned.n.Add(1)
	l.log.WarnContext(ctx, "lease: the MySQL DSN has no interpolateParams=true: go-sql-driver prepares, runs and closes every statement with arguments, "+
		"two round trips where one does (measured on loopback: 0.6-0.7 of the lease operations per second); add interpolateParams=true to the DSN "+
		"(mysql.Config.InterpolateParams), unless its charset is one interpolation refuses (big5, gbk, sjis, cp932, gb2312, gb18030)",
		slog.String("table", l.table.name))
}

// probeMySQL reads the expiry column's type and fractional digits (no
// row when the column is not found). The schema and table are constants
// in the WHERE clause, so that MariaDB opens that one table's definition
// instead of scanning every schema's; DATABASE(), which only MySQL has,
// is in the select list so that no other dialect runs the statement.
func (s sqlBuilder) probeMySQL() string {
	schema, table := s.t.split()
	sch := "DATABASE()"
	if schema != "" {
		sch = "'" + schema + "'"
	}
	return "SELECT DATABASE(), DATA_TYPE, DATETIME_PRECISION FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = " + sch +
		" AND TABLE_NAME = '" + table + "' AND COLUMN_NAME = '" + s.t.cols.ExpiresAt + "'"
}

// probePostgres reads the expiry column's type and typmod (the precision
// of a timestamp, -1 for the default 6); one row always. The table is
// found with to_regclass, through the search path, as the lease
// statements find it.
func (s sqlBuilder) probePostgres() string {
	return "SELECT t.typname, a.atttypmod FROM (SELECT to_regclass('" + s.t.qname(Postgres) + "') AS r) x " +
		"LEFT JOIN pg_attribute a ON a.attrelid = x.r AND a.attname = '" + s.t.cols.ExpiresAt + "' AND NOT a.attisdropped " +
		"LEFT JOIN pg_type t ON t.oid = a.atttypid"
}

// probeSQLite reads the connection's busy timeout and the journal mode of
// the main database (table-valued pragmas exist on SQLite alone).
const probeSQLite = "SELECT (SELECT * FROM pragma_busy_timeout), (SELECT * FROM pragma_journal_mode)"

// mysqlPrecision is the fractional digits of a DATETIME or TIMESTAMP
// column, or -1 for another type.
func mysqlPrecision(typ string, prec sql.NullInt64) int {
	switch strings.ToLower(typ) {
	case "datetime", "timestamp":
		if prec.Valid {
			return int(prec.Int64)
		}
		return 0
	}
	return -1
}

// postgresPrecision is the fractional digits of a timestamp or timestamptz
// column (typmod -1 means the default, 6), or -1 for another type.
func postgresPrecision(typ string, mod sql.NullInt64) int {
	switch typ {
	case "timestamptz", "timestamp":
		if !mod.Valid || mod.Int64 < 0 || mod.Int64 > 6 {
			return 6
		}
		return int(mod.Int64)
	}
	return -1
}

// judgeColumn refuses an expiry column coarser than the Lease's
// resolution: its stored expiry could fall up to one step short of
// now + TTL, before the holder's trust deadline, and on MySQL a renewal in
// the same step would leave the row unchanged and read as lost. A column
// not found, or of a type that has no precision, is left to the lease
// statements themselves.
func (l *Lease[K]) judgeColumn(typ string, v sql.NullInt64, precision func(string, sql.NullInt64) int) error {
	p := precision(typ, v)
	if p < 0 || p >= 6 {
		return nil
	}
	step := time.Microsecond
	for range 6 - p {
		step *= 10
	}
	if l.res >= step {
		return nil
	}
	return invalid("expiry column", fmt.Sprintf("%s.%s is %s(%d), which stores the expiry in steps of %s: declare Options.ExpiryResolution = %s, or give the column microseconds (%s)",
		l.table.name, l.table.cols.ExpiresAt, typ, p, step, step, map[Dialect]string{MySQL: "DATETIME(6)", Postgres: "timestamptz"}[l.dialect]))
}

// warnSQLite logs, once per handle, the SQLite settings found missing
// that the package doc asks for. Neither makes a lease unsafe; both make
// writers fail or wait where they need not.
func (l *Lease[K]) warnSQLite(ctx context.Context, busy int64, journal string) {
	if busy <= 0 {
		l.log.WarnContext(ctx, "lease: SQLite busy_timeout is 0: a statement that finds the database locked fails at once with SQLITE_BUSY instead of waiting; open the database with a busy timeout (modernc.org/sqlite: _pragma=busy_timeout(10000); mattn/go-sqlite3: _busy_timeout=10000)",
			slog.String("table", l.table.name))
	}
	if !strings.EqualFold(journal, "wal") {
		l.log.WarnContext(ctx, "lease: SQLite journal_mode is not WAL: readers and the writer block each other; open the database with journal_mode WAL (modernc.org/sqlite: _pragma=journal_mode(WAL); mattn/go-sqlite3: _journal_mode=WAL)",
			slog.String("table", l.table.name), slog.String("journal_mode", journal))
	}
}
