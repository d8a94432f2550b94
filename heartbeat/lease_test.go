package heartbeat_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// eachDialect runs fn as a parallel subtest per dialect with the item table
// and one free row "k".
func eachDialect(t *testing.T, fn func(t *testing.T, e conformance.Env)) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			e := conformance.Setup(t, testdb.Open(t, d), lease.Options{})
			e.Insert(t, "k")
			fn(t, e)
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// superviseLease acquires "k" for "worker" and supervises it as "request".
func superviseLease(t *testing.T, e conformance.Env, cfg heartbeat.Config) (lease.Grant[string], *heartbeat.LeaseRenewer[string], *spy, *heartbeat.Supervisor, context.Context, *recorder) {
	t.Helper()
	g, err := e.Lease.Acquire(ctxT(t), e.DB, "k", "worker", cfg.TTL)
	require.NoError(t, err)
	lr := heartbeat.ForLease("request", e.Lease, e.DB, g)
	sp := &spy{Renewer: lr}
	s, work, rec := start(t, cfg, sp)
	return g, lr, sp, s, work, rec
}

func TestLeaseKeptAlive(t *testing.T) {
	eachDialect(t, func(t *testing.T, e conformance.Env) {
		ctx := ctxT(t)
		g, lr, sp, s, work, _ := superviseLease(t, e, heartbeat.Config{Interval: 50 * time.Millisecond, TTL: 300 * time.Millisecond})
		pause(time.Second) // more than three TTLs

		require.NoError(t, work.Err())
		require.NoError(t, s.Lost())
		st, err := e.Lease.Inspect(ctx, e.DB, "k")
		require.NoError(t, err)
		assert.True(t, st.Held)
		assert.Equal(t, "worker", st.Holder)
		assert.Equal(t, g.Generation, st.Generation, "renewals keep the generation")
		_, err = engine.Verify(ctx, e.Lease, e.DB, g, false)
		assert.NoError(t, err, "the original grant still holds")
		assert.True(t, lr.Grant().Deadline.After(g.Deadline.Add(500*time.Millisecond)))
		assert.True(t, engine.SameToken(lr.Grant().Token, g.Token))
		assert.GreaterOrEqual(t, len(sp.Calls()), 5)
		s.Stop()
		assert.ErrorIs(t, context.Cause(work), heartbeat.ErrStopped)
		st, err = e.Lease.Inspect(ctx, e.DB, "k")
		require.NoError(t, err)
		assert.True(t, st.Held, "Stop does not release")
	})
}

func TestLeaseLostToAnotherHolder(t *testing.T) {
	eachDialect(t, func(t *testing.T, e conformance.Env) {
		ctx := ctxT(t)
		var logs syncBuffer
		cfg := heartbeat.Config{Interval: 50 * time.Millisecond, TTL: 300 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
		g, _, sp, s, work, rec := superviseLease(t, e, cfg)
		rec.wait(t, "a renewal", is(heartbeat.EventRenewed, "request"))

		// Behind the supervisor's back: release, and another holder wins.
		require.NoError(t, e.Lease.Release(ctx, e.DB, g))
		released := time.Now()
		bob, err := e.Lease.Acquire(ctx, e.DB, "k", "bob", time.Minute)
		require.NoError(t, err)
		waitDone(t, work)

		le := lostError(t, context.Cause(work))
		assert.Equal(t, "request", le.Lease)
		assert.Equal(t, heartbeat.ReasonGone, le.Reason)
		var inner *lease.LostError
		require.ErrorAs(t, le, &inner)
		assert.Equal(t, "renew", inner.Op)
		assert.Same(t, le, lostError(t, s.Lost()))

		// The first renewal sent after the release found it: within one
		// interval, and none after it.
		var after []call
		for _, c := range sp.Calls() {
			if c.Start.After(released) {
				after = append(after, c)
			}
		}
		require.Len(t, after, 1)
		assert.ErrorIs(t, after[0].Err, lease.ErrLost)

		st, err := e.Lease.Inspect(ctx, e.DB, "k")
		require.NoError(t, err)
		assert.Equal(t, "bob", st.Holder, "the new holder is left alone")
		assert.Equal(t, bob.Generation, st.Generation)

		s.Stop()
		for _, text := range []string{le.Error(), logs.String()} {
			assert.NotContains(t, text, engine.Secret(g.Token))
			assert.NotContains(t, text, engine.Secret(bob.Token))
		}
		assert.Contains(t, logs.String(), "lease=request")
	})
}

// TestLeaseLongTransaction holds the leased row locked (MySQL, PostgreSQL:
// SELECT … FOR UPDATE via Verify) or the database write lock (SQLite: BEGIN
// IMMEDIATE) for more than two intervals: the renewal waits, is not failed,
// and goes through after the commit.
func TestLeaseLongTransaction(t *testing.T) {
	eachDialect(t, func(t *testing.T, e conformance.Env) {
		ctx := ctxT(t)
		const iv = 100 * time.Millisecond
		g, _, sp, s, work, rec := superviseLease(t, e, heartbeat.Config{Interval: iv, TTL: 600 * time.Millisecond})
		rec.wait(t, "a renewal", is(heartbeat.EventRenewed, "request"))

		tx, err := e.DB.BeginTxx(ctx, nil)
		require.NoError(t, err)
		defer tx.Rollback() //nolint:errcheck
		_, err = engine.Verify(ctx, e.Lease, tx, g, true)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, e.DB.Rebind("UPDATE lease_item SET note = ? WHERE item_key = ?"), "side effect", "k")
		require.NoError(t, err)
		locked := time.Now()
		pause(2*iv + iv/2)
		committed := time.Now()
		require.NoError(t, tx.Commit())

		for {
			ev := rec.wait(t, "a renewal after the commit", is(heartbeat.EventRenewed, "request"))
			if ev.At.After(committed) {
				break
			}
		}
		assert.NoError(t, work.Err())
		assert.NoError(t, s.Lost())

		// A renewal was sent while the lock was held, waited for the commit
		// and succeeded; none failed.
		var waited bool
		for _, c := range sp.Calls() {
			assert.NoError(t, c.Err)
			if c.Start.After(locked) && c.Start.Before(committed) && c.End.After(committed) {
				waited = true
				assert.True(t, c.CtxDeadline.After(committed), "its context allowed the wait")
			}
		}
		assert.True(t, waited, "a renewal was blocked by the transaction")
		st, err := e.Lease.Inspect(ctx, e.DB, "k")
		require.NoError(t, err)
		assert.True(t, st.Held)
		assert.Equal(t, "worker", st.Holder)
	})
}

// TestLeaseLongTransactionPastDeadline holds the lock past the trust
// deadline: the blocked renewal is cancelled at the deadline and the work
// is cancelled then, not when the transaction ends.
func TestLeaseLongTransactionPastDeadline(t *testing.T) {
	eachDialect(t, func(t *testing.T, e conformance.Env) {
		ctx := ctxT(t)
		_, lr, _, _, work, rec := superviseLease(t, e, heartbeat.Config{Interval: 50 * time.Millisecond, TTL: 300 * time.Millisecond})
		rec.wait(t, "a renewal", is(heartbeat.EventRenewed, "request"))

		tx, err := e.DB.BeginTxx(ctx, nil)
		require.NoError(t, err)
		defer tx.Rollback() //nolint:errcheck
		_, err = engine.Verify(ctx, e.Lease, tx, lr.Grant(), true)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, e.DB.Rebind("UPDATE lease_item SET note = ? WHERE item_key = ?"), "side effect", "k")
		require.NoError(t, err)
		deadline := lr.Grant().Deadline

		done := waitDone(t, work) // the transaction is still open
		assert.False(t, done.Before(deadline))
		le := lostError(t, context.Cause(work))
		assert.Equal(t, heartbeat.ReasonDeadline, le.Reason)
		assert.Equal(t, "request", le.Lease)
		require.NoError(t, tx.Rollback())
	})
}
