package engine

import (
	"context"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rowlease/rowlease/internal/driver"
)

// The first-use check (see the package doc, "First use"): once per Lease
// and database handle, before the first operation's own statement, one
// statement reads what the Lease must know of the database:
//
//   - MySQL: the expiry column's type and DATETIME_PRECISION from
//     information_schema.COLUMNS; on a go-sql-driver pool, sent through
//     the driver connection with one argument, which also tells whether
//     the DSN has interpolateParams=true (see the MySQL driver's probe);
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
var errNotFound = driver.ErrColumnNotFound

// runProbe sends the driver's check on db and judges it: a refusal, or a
// driver error when the check itself could not run.
func (l *Lease[K]) runProbe(ctx context.Context, db DB) (refusal, err error) {
	if d, ok := driverDialect(db); ok && d != l.dialect {
		return l.wrongDialect(d), nil
	}
	schema, table := l.table.split()
	res, err := l.drv.Probe(ctx, db, driver.ProbeParams{
		Schema: schema, Table: table, QuotedTable: l.table.qname(l.drv), Name: l.table.name,
		ExpiresAt: l.table.cols.ExpiresAt, PrepareAlways: l.prepare == PrepareAlways, Log: l.log,
	})
	if errors.Is(err, driver.ErrColumnNotFound) {
		return nil, errNotFound
	}
	if err == nil {
		if res.Checked {
			return l.judgeColumn(res), nil
		}
		return nil, nil
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
		if _, ok := db.(interface{ Driver() sqldriver.Driver }); !ok {
			return 0, false
		}
	}
	d, err := DetectDialect(db)
	return d, err == nil
}

// errDialect is the dialect whose driver returned err: the first driver
// that recognises it (Driver.Classify), MySQL's, PostgreSQL's, SQLite's.
func errDialect(err error) (Dialect, bool) {
	d, _, ok := recognise(err)
	return d, ok
}

// judgeColumn refuses an expiry column coarser than the Lease's
// resolution: its stored expiry could fall up to one step short of
// now + TTL, before the holder's trust deadline, and on MySQL a renewal in
// the same step would leave the row unchanged and read as lost. A column
// not found, or of a type that has no precision, is left to the lease
// statements themselves.
func (l *Lease[K]) judgeColumn(res driver.ProbeResult) error {
	p := res.Precision
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
		l.table.name, l.table.cols.ExpiresAt, res.Type, p, step, step, res.Suggest))
}
