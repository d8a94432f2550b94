// Package countdb wraps a lease.DB and counts the statements sent through
// it, for tests and benchmarks that pin how many round trips an operation
// costs.
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

// Counter counts statements across every DB it wraps. It is safe for
// concurrent use.
type Counter struct {
	n   atomic.Int64
	mu  sync.Mutex
	log []string
	rec bool
}

// Wrap returns db with every statement counted.
func (c *Counter) Wrap(db DB) DB { return &counted{db: db, c: c} }

// Count returns the statements counted so far.
func (c *Counter) Count() int64 { return c.n.Load() }

// Reset sets the count to zero and clears the log.
func (c *Counter) Reset() {
	c.n.Store(0)
	c.mu.Lock()
	c.log = nil
	c.mu.Unlock()
}

// Record turns on keeping the text of each statement.
func (c *Counter) Record(on bool) { c.mu.Lock(); c.rec = on; c.mu.Unlock() }

// Log returns the statements recorded since the last Reset.
func (c *Counter) Log() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.log...)
}

func (c *Counter) add(q string) {
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
