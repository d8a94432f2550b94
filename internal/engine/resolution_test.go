package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// TestSQLiteDeadlineHoldsTheMargin: SQLite's clock reads whole
// milliseconds, up to 1ms behind real time, so now+TTL may be stored up to
// 1ms early. Every trust deadline must still fall a whole safety margin
// before the stored expiry. SQLite's clock is this process's own wall
// clock, so the two can be compared directly: the stored expiry (µs since
// the epoch) against the deadline's wall reading. A busy machine only
// widens the gap (the statement runs later than the send time).
func TestSQLiteDeadlineHoldsTheMargin(t *testing.T) {
	ctx := context.Background()
	const (
		ttl    = 5 * time.Millisecond
		margin = 200 * time.Microsecond
	)
	e := conformance.Setup(t, testdb.Open(t, engine.SQLite), engine.Options{SafetyMargin: margin})
	e.Insert(t, "k")
	stored := func() time.Time {
		var us int64
		require.NoError(t, e.DB.GetContext(ctx, &us, "SELECT expires_at FROM lease_item WHERE item_key = 'k'"))
		return time.UnixMicro(us)
	}
	short := 0
	var worst time.Duration = time.Hour
	g, err := e.Lease.Acquire(ctx, e.DB, "k", "a", ttl)
	require.NoError(t, err)
	for i := range 200 {
		if i%2 == 0 {
			g, err = e.Lease.Renew(ctx, e.DB, g, ttl)
		} else {
			require.NoError(t, e.Lease.Release(ctx, e.DB, g))
			g, err = e.Lease.Acquire(ctx, e.DB, "k", "a", ttl)
		}
		require.NoError(t, err)
		gap := stored().Sub(g.Deadline.Round(0)) // wall readings only
		worst = min(worst, gap)
		if gap < margin {
			short++
		}
	}
	assert.Zero(t, short, "of 200 grants, %d had a deadline less than the margin before the stored expiry (worst gap %s)", short, worst)
}
