package heartbeat_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/lease"
)

func TestHoldKeepsTheLeaseForFnAndReleasesIt(t *testing.T) {
	eachDialect(t, func(t *testing.T, e conformance.Env) {
		ctx := ctxT(t)
		const ttl = 300 * time.Millisecond
		rec := newRecorder()
		var gen int64
		err := heartbeat.Hold(ctx, e.Lease, e.DB, "k", "worker", heartbeat.HoldOptions{TTL: ttl, Interval: ttl / 4, OnEvent: rec.on},
			func(ctx context.Context, g lease.Grant[string]) error {
				gen = g.Generation
				// Work for several TTLs, kept alive by renewals.
				for range 4 {
					rec.wait(t, "a renewal", is(heartbeat.EventRenewed, "lease"))
				}
				st, err := e.Lease.Inspect(ctx, e.DB, "k")
				require.NoError(t, err)
				assert.True(t, st.Held)
				assert.Equal(t, "worker", st.Holder)
				_, err = e.Lease.Acquire(ctx, e.DB, "k", "other", ttl)
				assert.ErrorIs(t, err, lease.ErrHeld)
				return ctx.Err()
			})
		require.NoError(t, err)
		assert.Equal(t, int64(1), gen)
		st, err := e.Lease.Inspect(ctx, e.DB, "k")
		require.NoError(t, err)
		assert.False(t, st.Held, "released at the end")
	})
}

func TestHoldReportsLossEvenWhenFnSucceeds(t *testing.T) {
	eachDialect(t, func(t *testing.T, e conformance.Env) {
		ctx := ctxT(t)
		const ttl = 300 * time.Millisecond
		sentinel := errors.New("fn saw its context end")
		err := heartbeat.Hold(ctx, e.Lease, e.DB, "k", "worker", heartbeat.HoldOptions{TTL: ttl, Interval: ttl / 4},
			func(ctx context.Context, g lease.Grant[string]) error {
				// Someone steals the lease: the next renewal finds it gone.
				_, err := e.DB.ExecContext(ctx, e.DB.Rebind("UPDATE "+conformance.ItemTable+" SET token = 'stolen' WHERE item_key = ?"), "k")
				require.NoError(t, err)
				<-ctx.Done()
				var lost *heartbeat.LostError
				require.ErrorAs(t, context.Cause(ctx), &lost)
				return sentinel
			})
		assert.ErrorIs(t, err, lease.ErrLost)
		assert.ErrorIs(t, err, sentinel)
		var lost *heartbeat.LostError
		require.ErrorAs(t, err, &lost)
		assert.Equal(t, heartbeat.ReasonGone, lost.Reason)
	})
}

func TestHoldFailsFastOrWaits(t *testing.T) {
	eachDialect(t, func(t *testing.T, e conformance.Env) {
		ctx := ctxT(t)
		const ttl = 2 * time.Second
		first, err := e.Lease.Acquire(ctx, e.DB, "k", "first", ttl)
		require.NoError(t, err)

		called := false
		err = heartbeat.Hold(ctx, e.Lease, e.DB, "k", "second", heartbeat.HoldOptions{TTL: ttl},
			func(context.Context, lease.Grant[string]) error { called = true; return nil })
		assert.ErrorIs(t, err, lease.ErrHeld, "fail-fast by default")
		assert.False(t, called)

		// A waiter gets it as soon as the first holder lets go.
		got := make(chan int64, 1)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := heartbeat.Hold(ctx, e.Lease, e.DB, "k", "second", heartbeat.HoldOptions{TTL: ttl, Wait: &lease.WaitOptions{MinDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond}},
				func(_ context.Context, g lease.Grant[string]) error { got <- g.Generation; return nil })
			assert.NoError(t, err)
		}()
		require.NoError(t, e.Lease.Release(ctx, e.DB, first))
		assert.Equal(t, first.Generation+1, <-got)
		wg.Wait()
	})
}

func TestHoldReleasesWhenFnPanics(t *testing.T) {
	eachDialect(t, func(t *testing.T, e conformance.Env) {
		ctx := ctxT(t)
		assert.PanicsWithValue(t, "boom", func() {
			_ = heartbeat.Hold(ctx, e.Lease, e.DB, "k", "worker", heartbeat.HoldOptions{TTL: time.Second},
				func(context.Context, lease.Grant[string]) error { panic("boom") })
		})
		st, err := e.Lease.Inspect(ctx, e.DB, "k")
		require.NoError(t, err)
		assert.False(t, st.Held)
	})
}

func TestAcquireWaitBoundsItsStatements(t *testing.T) {
	eachDialect(t, func(t *testing.T, e conformance.Env) {
		ctx := ctxT(t)
		_, err := e.Lease.Acquire(ctx, e.DB, "k", "holder", time.Minute)
		require.NoError(t, err)
		// A waiter whose context ends while the lease stays held gets
		// both errors, and polled no faster than its MinDelay allows.
		wctx, cancel := context.WithCancel(ctx)
		var attempts atomic.Int64
		counting := countingDB{DB: e.DB, n: &attempts}
		// The Lease's one-time check of a handle it cannot see the pool of
		// runs before the counted section.
		require.NoError(t, engine.Check(ctx, e.Lease, counting))
		attempts.Store(0)
		done := make(chan error, 1)
		go func() {
			_, err := e.Lease.AcquireWait(wctx, counting, "k", "waiter", time.Second, lease.AcquireOptions{}, lease.WaitOptions{MinDelay: 20 * time.Millisecond, MaxDelay: 40 * time.Millisecond})
			done <- err
		}()
		began := time.Now()
		for attempts.Load() < 6 {
			require.Less(t, time.Since(began), limit, "the waiter stopped trying")
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		err = <-done
		elapsed := time.Since(began)
		// Cancelled while waiting: the last conflict joined with the
		// cause; cancelled mid-statement: the statement's own error.
		assert.ErrorIs(t, err, context.Canceled)
		// Each attempt is two statements, at most one attempt per MinDelay
		// (plus the first).
		assert.LessOrEqual(t, attempts.Load(), 2*(int64(elapsed/(20*time.Millisecond))+1))

		_, err = e.Lease.AcquireWait(ctx, e.DB, "missing", "waiter", time.Second, lease.AcquireOptions{}, lease.WaitOptions{})
		assert.ErrorIs(t, err, lease.ErrNotFound, "only a held lease is waited for: %v", err)
		_, err = e.Lease.AcquireWait(ctx, e.DB, "k", "waiter", time.Second, lease.AcquireOptions{}, lease.WaitOptions{MinDelay: time.Microsecond})
		assert.ErrorIs(t, err, lease.ErrInvalid)
	})
}

// countingDB counts the statements sent through it.
type countingDB struct {
	lease.DB
	n *atomic.Int64
}

func (c countingDB) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	c.n.Add(1)
	return c.DB.ExecContext(ctx, q, args...)
}

func (c countingDB) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	c.n.Add(1)
	return c.DB.QueryRowContext(ctx, q, args...)
}
