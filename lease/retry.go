package lease

import (
	"context"
	"math/rand/v2"
	"time"
)

// MaxAttempts bounds the runs of one lease statement that a database
// rolled back as a deadlock or serialization victim, or — on a
// multi-primary cluster (Galera) — as a certification failure (MySQL error
// 1213, PostgreSQL 40001 or 40P01). Such a statement took no effect, so on
// a pool, where it ran in autocommit, running it again is safe. Inside a
// transaction (a *sql.Tx, a *sql.Conn, a FlowDB routing into one) the whole
// transaction was rolled back, and the error is returned at once.
const MaxAttempts = 4

// autocommit reports whether statements on db run in autocommit: db is a
// pool (*sql.DB, *sqlx.DB), or a FlowDB with no transaction open.
func autocommit(db DB) bool {
	_, ok := resolve(db).(pool)
	return ok
}

// retry runs fn, and again after a jittered pause while it fails as a
// deadlock, serialization or certification victim in autocommit (see
// MaxAttempts). SQLite's busy errors are not retried here: the busy
// timeout already waited.
func (l *Lease[K]) retry(ctx context.Context, db DB, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || attempt >= MaxAttempts || l.dialect == SQLite || !IsRetryable(err) || !autocommit(db) {
			return err
		}
		if !Backoff(ctx, attempt) {
			return err
		}
	}
}

// Backoff waits before attempt+1 of an operation that failed transiently:
// a jittered delay that doubles from 5ms (between half and one and a half
// times it). It reports false, at once, when ctx ends first.
func Backoff(ctx context.Context, attempt int) bool {
	d := (5 * time.Millisecond) << min(attempt-1, 10)
	d = d/2 + time.Duration(rand.Int64N(int64(d)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
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
