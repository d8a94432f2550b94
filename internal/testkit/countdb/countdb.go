// Package countdb counts the statements sent to a database, for tests and
// benchmarks that pin how many round trips an operation costs.
//
// There are two ways in. [Counter.Wrap] wraps a lease.DB-shaped value and
// counts the calls made through it. [OpenDB] opens a *sql.DB through a
// counting database/sql/driver wrapper, so that every round trip the pool
// makes is counted, including those inside a *sql.Tx that library code
// opens itself. Both add to the same [Counter].
package countdb

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
)

// DB is the database interface counted (the same shape as lease.DB).
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Counter counts statements across every DB it wraps and every *sql.DB
// opened with it by [OpenDB]. The zero value is ready to use; it is safe for
// concurrent use.
type Counter struct {
	n         atomic.Int64 // statements
	begins    atomic.Int64
	commits   atomic.Int64
	rollbacks atomic.Int64
	prepares  atomic.Int64
	paused    atomic.Int64                       // Pause depth; counting is off while > 0
	fail      atomic.Pointer[func(string) error] // see FailAfter
	before    atomic.Pointer[func(string)]       // see BeforeSend

	mu  sync.Mutex
	log []string
	rec bool
}

// Stats are counts by kind, as returned by [Counter.Stats].
type Stats struct {
	// Statements counts statements executed: calls through a [Counter.Wrap]
	// value, and Exec/Query round trips on a driver connection or prepared
	// statement opened by [OpenDB]. It equals [Counter.Count].
	Statements int64
	// Begins counts transactions begun on a driver connection.
	Begins int64
	// Commits counts driver transaction commits.
	Commits int64
	// Rollbacks counts driver transaction rollbacks.
	Rollbacks int64
	// Prepares counts statements prepared on a driver connection, whether
	// explicitly or by database/sql after the driver declined to run a
	// statement with arguments directly (driver.ErrSkip). A prepare is a
	// round trip of its own and is not included in Statements.
	Prepares int64
}

// Wrap returns db with every statement counted.
func (c *Counter) Wrap(db DB) DB { return &counted{db: db, c: c} }

// Count returns the statements counted so far (Stats().Statements).
func (c *Counter) Count() int64 { return c.n.Load() }

// Stats returns the counts by kind. Each field is read atomically; the
// fields are not a single snapshot while other goroutines are counting.
func (c *Counter) Stats() Stats {
	return Stats{
		Statements: c.n.Load(),
		Begins:     c.begins.Load(),
		Commits:    c.commits.Load(),
		Rollbacks:  c.rollbacks.Load(),
		Prepares:   c.prepares.Load(),
	}
}

// Pause stops counting until the matching [Counter.Resume]: nothing made
// while paused is counted or logged, through either [Counter.Wrap] or
// [OpenDB]. It is meant for excluding a side effect's own statements.
// Pauses nest, and the pause applies to every goroutine using c. It is safe
// for concurrent use.
func (c *Counter) Pause() { c.paused.Add(1) }

// Resume ends one [Counter.Pause]; counting restarts when every Pause has
// been resumed. A Resume without a Pause does nothing. It is safe for
// concurrent use.
func (c *Counter) Resume() {
	for {
		p := c.paused.Load()
		if p <= 0 || c.paused.CompareAndSwap(p, p-1) {
			return
		}
	}
}

// counting reports whether c is counting (not paused).
func (c *Counter) counting() bool { return c.paused.Load() == 0 }

// Reset sets every count to zero and clears the log. It leaves the pause
// and record settings alone.
func (c *Counter) Reset() {
	c.n.Store(0)
	c.begins.Store(0)
	c.commits.Store(0)
	c.rollbacks.Store(0)
	c.prepares.Store(0)
	c.mu.Lock()
	c.log = nil
	c.mu.Unlock()
}

// Record turns on (or off) keeping the text of each statement.
func (c *Counter) Record(on bool) { c.mu.Lock(); c.rec = on; c.mu.Unlock() }

// Log returns the text of the statements recorded since the last Reset:
// those counted in Stats().Statements while recording was on. Prepares,
// begins, commits and rollbacks are not logged.
func (c *Counter) Log() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.log...)
}

// add counts one statement, q, unless c is paused.
func (c *Counter) add(q string) {
	if !c.counting() {
		return
	}
	c.n.Add(1)
	c.mu.Lock()
	if c.rec {
		c.log = append(c.log, q)
	}
	c.mu.Unlock()
}

type counted struct {
	db DB
	c  *Counter
}

func (d *counted) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	d.c.add(q)
	return d.db.ExecContext(ctx, q, args...)
}

func (d *counted) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	d.c.add(q)
	return d.db.QueryContext(ctx, q, args...)
}

func (d *counted) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	d.c.add(q)
	return d.db.QueryRowContext(ctx, q, args...)
}
