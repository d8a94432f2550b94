package heartbeat_test

import (
	"context"
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

// offsetClock is a local clock off real time by a fixed amount; it keeps
// the monotonic reading, as lease.Clock requires.
type offsetClock time.Duration

func (c offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }

// eachDialectClock is eachDialect with the lease's clock set to clk.
func eachDialectClock(t *testing.T, clk lease.Clock, fn func(t *testing.T, e conformance.Env)) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			e := conformance.Setup(t, testdb.Open(t, d), lease.Options{Clock: clk})
			e.Insert(t, "k")
			fn(t, e)
		})
	}
}

// TestClockBehind (issue 8, item 11): the leases' trust deadlines come
// from an injected clock a minute behind real time. A supervisor given the
// same clock keeps the lease; one reading time.Now would find every
// deadline a minute past and cancel the work at once.
func TestClockBehind(t *testing.T) {
	clk := offsetClock(-time.Minute)
	eachDialectClock(t, clk, func(t *testing.T, e conformance.Env) {
		_, _, _, s, work, rec := superviseLease(t, e, heartbeat.Config{Interval: 200 * time.Millisecond, TTL: 2 * time.Second, Clock: clk})
		for renewed := 0; renewed < 3; {
			ev := rec.wait(t, "a renewal or a loss", func(ev stamped) bool { return ev.Kind != heartbeat.EventRetry })
			require.Equal(t, heartbeat.EventRenewed, ev.Kind, "lost: %v", ev.Err)
			renewed++
		}
		assert.NoError(t, work.Err())
		assert.NoError(t, s.Lost())
	})
}

// TestClockAhead (issue 8, item 11): with the injected clock a minute
// ahead, a renewal blocked past the trust deadline (a long transaction
// holds the row) still cancels the work at that deadline, not a minute
// later.
func TestClockAhead(t *testing.T) {
	clk := offsetClock(time.Minute)
	eachDialectClock(t, clk, func(t *testing.T, e conformance.Env) {
		ctx := ctxT(t)
		_, lr, _, _, work, rec := superviseLease(t, e, heartbeat.Config{Interval: 200 * time.Millisecond, TTL: 2 * time.Second, Clock: clk})
		rec.wait(t, "a renewal", is(heartbeat.EventRenewed, "request"))

		tx, err := e.DB.BeginTxx(ctx, nil)
		require.NoError(t, err)
		defer tx.Rollback() //nolint:errcheck
		_, err = engine.Verify(ctx, e.Lease, tx, lr.Grant(), true)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, e.DB.Rebind("UPDATE lease_item SET note = ? WHERE item_key = ?"), "side effect", "k")
		require.NoError(t, err)
		deadline := lr.Grant().Deadline

		done := waitDone(t, work) // within limit (10s), not a minute
		assert.False(t, done.Add(time.Minute).Before(deadline), "not before the trust deadline")
		le := lostError(t, context.Cause(work))
		assert.Equal(t, heartbeat.ReasonDeadline, le.Reason)
		require.NoError(t, tx.Rollback())
	})
}
