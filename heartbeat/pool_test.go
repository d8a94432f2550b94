package heartbeat_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// holdRest takes every connection of db (opened with SetMaxOpenConns)
// that is not in use, and gives them back at cleanup: the work of flows
// holding the rest of the pool.
func holdRest(t *testing.T, db *sql.DB) {
	t.Helper()
	for db.Stats().InUse < db.Stats().MaxOpenConnections {
		c, err := db.Conn(ctxT(t))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
	}
}

// TestBatcherRenewsOnItsOwnConnection: with BatchConfig.Pool and Reserve,
// a pool whose every other connection is held (by the work, say) for
// longer than the TTL does not starve the renewals: they run on the
// Batcher's kept connection, and the flow keeps its lease through several
// TTLs. Without it, the round waits for a connection until the trust
// deadline and the lease is lost.
func TestBatcherRenewsOnItsOwnConnection(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			db := testdb.Open(t, d)
			e := conformance.Setup(t, db, lease.Options{})
			e.Insert(t, "k")
			db.SetMaxOpenConns(3)
			const ttl, interval = 600 * time.Millisecond, 150 * time.Millisecond
			b, err := heartbeat.NewBatcher(heartbeat.BatchConfig{Interval: interval, Pool: db})
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, b.Close()) })
			require.NoError(t, b.Reserve(ctxT(t)))
			g, err := e.Lease.Acquire(ctxT(t), db, "k", "worker", ttl)
			require.NoError(t, err)
			holdRest(t, db.DB)
			rec := newRecorder()
			sup, err := heartbeat.New(heartbeat.Config{Interval: interval, TTL: ttl, Batcher: b, OnEvent: rec.on})
			require.NoError(t, err)
			sup.Add(heartbeat.ForLease("request", e.Lease, db, g))
			work, err := sup.Start(context.Background())
			require.NoError(t, err)
			defer sup.Stop()
			start := time.Now()
			for time.Since(start) < 3*ttl { // renewed past several trust deadlines
				ev := rec.wait(t, "a renewal", func(ev stamped) bool {
					return ev.Kind == heartbeat.EventRenewed || ev.Kind == heartbeat.EventLost
				})
				require.Equal(t, heartbeat.EventRenewed, ev.Kind, "lost: %v", ev.Err)
			}
			require.NoError(t, work.Err())
		})
	}
}

// TestBatcherKeepsItsConnectionBetweenRuns: the kept connection of
// BatchConfig.Pool stays the Batcher's when its last lease ends, so that
// the next run, a moment later, takes no other (it would be the one the
// last run had just used); it is given back at Close, or once the
// Batcher has had no lease for BatchConfig.KeepIdle.
func TestBatcherKeepsItsConnectionBetweenRuns(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			db := testdb.Open(t, d)
			e := conformance.Setup(t, db, lease.Options{})
			e.Insert(t, "k")
			const ttl, interval = 6 * time.Second, 1500 * time.Millisecond
			keep := time.Minute // the first two runs: long enough for any machine
			b, err := heartbeat.NewBatcher(heartbeat.BatchConfig{Interval: interval, Pool: db, KeepIdle: keep})
			require.NoError(t, err)
			closed := false
			t.Cleanup(func() {
				if !closed {
					assert.NoError(t, b.Close())
				}
			})
			run := func() {
				require.NoError(t, b.Reserve(ctxT(t)))
				g, err := e.Lease.Acquire(ctxT(t), db, "k", "worker", ttl)
				require.NoError(t, err)
				sup, err := heartbeat.New(heartbeat.Config{Interval: interval, TTL: ttl, Batcher: b})
				require.NoError(t, err)
				sup.Add(heartbeat.ForLease("request", e.Lease, db, g))
				_, err = sup.Start(context.Background())
				require.NoError(t, err)
				sup.Stop()
				require.NoError(t, e.Lease.Release(ctxT(t), db, g))
			}
			run()
			assert.Equal(t, 1, db.Stats().InUse, "kept after the run")
			opened := db.Stats().OpenConnections
			run()
			assert.Equal(t, 1, db.Stats().InUse, "kept after the second run")
			assert.Equal(t, opened, db.Stats().OpenConnections, "the second run took no other connection")
			require.NoError(t, b.Close())
			closed = true
			assert.Zero(t, db.Stats().InUse, "given back at Close")

			// With the default (100 ms, or the Interval if shorter), it is
			// given back a moment after the last lease, with no Close.
			b, err = heartbeat.NewBatcher(heartbeat.BatchConfig{Interval: interval, Pool: db})
			require.NoError(t, err)
			defer func() { assert.NoError(t, b.Close()) }()
			run()
			require.Eventually(t, func() bool { return db.Stats().InUse == 0 }, 10*interval, 5*time.Millisecond,
				"given back a moment after the last lease")
		})
	}
}

// TestPoolExhaustedLoss: when no connection of the pool is free until the
// trust deadline, the loss says so — ReasonPoolExhausted, a cause that
// matches lease.ErrPoolExhausted (and lease.ErrLost: the work must stop)
// — for a Batcher that has not taken its connection yet and for a
// Supervisor that renews on its own.
func TestPoolExhaustedLoss(t *testing.T) {
	for _, d := range testdb.Dialects() {
		for _, batched := range []bool{true, false} {
			name := d.String() + "/separate"
			if batched {
				name = d.String() + "/batched"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				db := testdb.Open(t, d)
				e := conformance.Setup(t, db, lease.Options{})
				e.Insert(t, "k")
				db.SetMaxOpenConns(2)
				const ttl, interval = 600 * time.Millisecond, 150 * time.Millisecond
				cfg := heartbeat.Config{Interval: interval, TTL: ttl}
				if batched {
					b, err := heartbeat.NewBatcher(heartbeat.BatchConfig{Interval: interval, Pool: db})
					require.NoError(t, err)
					t.Cleanup(func() { assert.NoError(t, b.Close()) })
					cfg.Batcher = b
				}
				g, err := e.Lease.Acquire(ctxT(t), db, "k", "worker", ttl)
				require.NoError(t, err)
				holdRest(t, db.DB)
				sup, err := heartbeat.New(cfg)
				require.NoError(t, err)
				sup.Add(heartbeat.ForLease("request", e.Lease, db, g))
				work, err := sup.Start(context.Background())
				require.NoError(t, err)
				defer sup.Stop()
				waitDone(t, work)
				cause := context.Cause(work)
				require.ErrorIs(t, cause, lease.ErrLost)
				require.ErrorIs(t, cause, lease.ErrPoolExhausted, "%v", cause)
				var le *heartbeat.LostError
				require.True(t, errors.As(cause, &le))
				assert.Equal(t, heartbeat.ReasonPoolExhausted, le.Reason)
				assert.True(t, lease.IsUnavailable(cause))
			})
		}
	}
}
