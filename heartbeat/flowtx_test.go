package heartbeat_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/lease"
)

// sqliteDSNs are SQLite files with transactions begun deferred (SQLite's
// default, and database/sql's) or immediate. Only modernc.org/sqlite: with
// mattn/go-sqlite3 a statement waiting in SQLite's busy handler does not
// see its context end, so a batch sent just before a flow's transaction
// takes the write lock waits for the whole transaction (see Batcher).
var sqliteDSNs = []struct {
	name, driver, query string
}{
	{"deferred", "sqlite", "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"},
	{"immediate", "sqlite", "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"},
}

func openSQLite(t *testing.T, driver, query string) conformance.Env {
	t.Helper()
	db, err := sqlx.Open(driver, "file:"+filepath.Join(t.TempDir(), "flow.db")+query)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return conformance.Setup(t, db, lease.Options{})
}

// TestRolledBackRenewalsMoveTheDeadlineBack: a flow's renewals routed into
// its open transaction (SQLite) count only if it commits. A transaction
// whose context ends is rolled back; before it frees the write lock, the
// flow's trust deadline goes back to the last committed renewal's — long
// past here — and its work is cancelled. So a second holder that takes
// the lease as soon as it can never finds the first one's work running.
// With and without a Batcher.
func TestRolledBackRenewalsMoveTheDeadlineBack(t *testing.T) {
	for _, batched := range []bool{false, true} {
		name := "supervisor"
		if batched {
			name = "batcher"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := openSQLite(t, "sqlite", sqliteDSNs[1].query)
			const interval, ttl = 100 * time.Millisecond, 600 * time.Millisecond
			cfg := heartbeat.Config{Interval: interval, TTL: ttl}
			if batched {
				b, err := heartbeat.NewBatcher(heartbeat.BatchConfig{Interval: interval})
				require.NoError(t, err)
				cfg.Batcher = b
			}
			flowA := engine.NewFlowDB(e.DB, e.Dialect)
			a := startFlowsWith(t, e, cfg, flowA, "a", 1, 1)[0]
			g0 := a.grants[0]
			ctx := ctxT(t)
			tctx, cancelTx := context.WithCancel(ctx)
			defer cancelTx()

			inTx := make(chan struct{})
			txErr := make(chan error, 1)
			go func() {
				txErr <- engine.RunFenced(tctx, e.DB, engine.FencedTx{Fences: []lease.Fence{e.Lease.Fence("lease0", g0)}, Flow: flowA}, func(tx *sql.Tx) error {
					close(inTx)
					<-tctx.Done()
					return tctx.Err()
				})
			}()
			<-inTx
			// A second holder tries as soon as it can: it waits for the
			// write lock, then finds the lease held or free.
			type took struct {
				firstLive bool
				err       error
			}
			thief := make(chan took, 1)
			go func() {
				deadline := time.Now().Add(limit)
				for {
					_, err := e.Lease.Acquire(ctx, e.DB, g0.Key, "thief", ttl)
					if err == nil {
						thief <- took{firstLive: a.work.Err() == nil}
						return
					}
					if !errors.Is(err, lease.ErrHeld) || time.Now().After(deadline) {
						thief <- took{err: err}
						return
					}
					pause(5 * time.Millisecond)
				}
			}()
			// Renewed inside the transaction until its trust outlives the
			// committed expiry, and that expiry has passed.
			for a.rs[0].Grant().Deadline.Before(g0.Deadline.Add(ttl)) {
				a.renewed(t, 1)
			}
			pause(time.Until(g0.Deadline) + interval)
			require.NoError(t, a.work.Err(), "kept alive inside the transaction")
			cancelTx()
			require.ErrorIs(t, <-txErr, context.Canceled)

			got := <-thief
			require.NoError(t, got.err, "the second holder takes the lease once the transaction is gone")
			assert.False(t, got.firstLive, "the first holder's work was cancelled before the lease could be taken")
			le := lostError(t, context.Cause(a.work))
			assert.Equal(t, heartbeat.ReasonDeadline, le.Reason)
			assert.ErrorIs(t, le, heartbeat.ErrRolledBack)
			assert.Equal(t, g0.Deadline, a.rs[0].Grant().Deadline, "the grant is back to the last committed renewal's")
		})
	}
}

// TestParallelFencedTransactionsOfOneFlow: one flow runs two fenced
// transactions at once (parallel tool calls) on SQLite, whatever the
// DSN's transaction mode. Its renewals go into the one that holds the
// write lock — never into one waiting for it, where they would wait with
// no deadline and hold up the shared Batcher — so the flow keeps its
// leases through both, and the other flows of the Batcher, put off while
// the lock is held, are renewed again as soon as it is free.
func TestParallelFencedTransactionsOfOneFlow(t *testing.T) {
	for _, c := range sqliteDSNs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := openSQLite(t, c.driver, c.query)
			const interval = 100 * time.Millisecond
			b, err := heartbeat.NewBatcher(heartbeat.BatchConfig{Interval: interval})
			require.NoError(t, err)
			flowA := engine.NewFlowDB(e.DB, e.Dialect)
			a := startFlows(t, e, b, flowA, "a", 1, 2, interval, 1500*time.Millisecond)[0]
			others := startFlows(t, e, b, e.DB, "o", 2, 1, interval, time.Minute)
			a.renewed(t, 1)
			ctx := ctxT(t)
			fences := []lease.Fence{e.Lease.Fence("lease0", a.grants[0]), e.Lease.Fence("lease1", a.grants[1])}

			var once sync.Once
			release := make(chan struct{})
			t.Cleanup(func() { once.Do(func() { close(release) }) })
			in1, in2 := make(chan struct{}), make(chan struct{})
			done1, done2 := make(chan error, 1), make(chan error, 1)
			effect := func(name string, in chan struct{}, wait <-chan struct{}) func(*sql.Tx) error {
				return func(tx *sql.Tx) error {
					if _, err := tx.ExecContext(ctx, "INSERT INTO lease_item (item_key, note) VALUES (?, 'effect')", name); err != nil {
						return err
					}
					close(in)
					if wait == nil {
						return nil
					}
					select {
					case <-wait:
						return nil
					case <-a.work.Done():
						return context.Cause(a.work)
					}
				}
			}
			go func() {
				done1 <- engine.RunFenced(ctx, e.DB, engine.FencedTx{Fences: fences, Flow: flowA}, effect("e1", in1, release))
			}()
			<-in1 // the first holds the write lock
			go func() {
				done2 <- engine.RunFenced(ctx, e.DB, engine.FencedTx{Fences: fences, Flow: flowA}, effect("e2", in2, nil))
			}()
			// Several rounds with both open: the flow is renewed.
			a.renewed(t, 4)
			require.NoError(t, a.work.Err())
			once.Do(func() { close(release) })
			require.NoError(t, <-done1)
			<-in2
			require.NoError(t, <-done2)
			require.NoError(t, a.work.Err())
			a.renewed(t, 2)

			for _, f := range others {
			drain:
				for {
					select {
					case ev := <-f.rec.ch:
						require.NotEqual(t, heartbeat.EventLost, ev.Kind, "%v", ev.Err)
					default:
						break drain
					}
				}
				f.renewed(t, 2)
				require.NoError(t, f.work.Err())
			}
			var n int
			require.NoError(t, e.DB.GetContext(ctx, &n, "SELECT COUNT(*) FROM lease_item WHERE note = 'effect'"))
			assert.Equal(t, 2, n, "both side effects committed")
		})
	}
}
