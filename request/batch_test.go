package request

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// heartbeatCost starts runs requests (one session each) whose agents wait,
// and counts at the driver what keeping them alive costs over rounds
// heartbeat intervals: statements, and round trips (statements, BEGIN,
// COMMIT), per interval. separate gives every run its own heartbeat (the
// unbatched Runner).
func heartbeatCost(tb testing.TB, d lease.Dialect, runs, rounds int, separate bool) (stmts, trips float64) {
	tb.Helper()
	c := &countdb.Counter{}
	db := testdb.OpenWith(tb, d, func(driver, dsn string) (*sql.DB, error) { return countdb.OpenDB(driver, dsn, c) })
	ctx := context.Background()
	require.NoError(tb, schema.Apply(ctx, db, d))
	// The test counts statements; it is not about timing. So the TTL has
	// most of a minute to spare over the interval: a run is lost only if
	// its renewals stall for 49s (TTL - interval - margin). On SQLite the
	// starts queue on the one write lock with the batch's renewals, and on
	// a loaded 2-core machine (make test runs every package at once) that
	// took 15s TTLs past their trust deadline. The interval, and so the
	// test's length, is unchanged.
	const ttl, interval = time.Minute, 5 * time.Second
	r, err := New(Config{DB: db, TTL: ttl, HeartbeatInterval: interval, SeparateHeartbeats: separate,
		Session: sessionConfigAutoCreate(), ReleaseTimeout: time.Minute})
	require.NoError(tb, err)
	started := make(chan struct{}, runs)
	release := make(chan struct{})
	// Runs start eight at a time, as traffic arrives, not a thousand in
	// the same instant: on SQLite every start is a write transaction, and
	// a thousand writers queued on its one lock would starve the
	// heartbeat's renewals before any run was in flight.
	starting := make(chan struct{}, 8)
	agent := func(done func()) Agent {
		return func(ctx context.Context, run *Run) (Answer, error) {
			done()
			started <- struct{}{}
			select {
			case <-release:
				return Answer{Reply: "ok"}, nil
			case <-ctx.Done():
				return Answer{}, context.Cause(ctx)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for i := range runs {
		wg.Go(func() {
			starting <- struct{}{}
			var once sync.Once
			done := func() { once.Do(func() { <-starting }) }
			_, err := r.Handle(ctx, Message{SessionKey: fmt.Sprintf("s%d", i), ClientRequestID: "c", Content: "x"}, agent(done))
			done()
			errs <- err
		})
	}
	defer func() {
		close(release)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(tb, err)
		}
	}()
	for range runs {
		select {
		case <-started:
		case err := <-errs:
			tb.Fatalf("a run ended before its agent started: %v", err)
		}
	}
	// Every run is in flight: count what rounds intervals cost.
	c.Reset()
	window := time.NewTimer(time.Duration(rounds) * interval)
	<-window.C
	st := c.Stats()
	n := float64(rounds)
	return float64(st.Statements) / n, float64(st.Statements+st.Begins+st.Commits+st.Rollbacks+st.Prepares) / n
}

// TestHeartbeatOfAThousandRuns: 1,000 runs in flight in one Runner cost at
// most 10 statements — and 10 round trips — per heartbeat interval, in
// total, on every dialect (unbatched they cost 2,000). Measured: 3
// statements (a renewal per table and the interrupt read); on MySQL 7
// round trips (each renewal in its own READ COMMITTED transaction).
func TestHeartbeatOfAThousandRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 1,000 runs per dialect")
	}
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			t0 := time.Now()
			stmts, trips := heartbeatCost(t, d, 1000, 2, false)
			t.Logf("1,000 runs in flight: %.1f statements, %.1f round trips per interval (test took %s)",
				stmts, trips, time.Since(t0).Round(time.Second))
			require.LessOrEqual(t, stmts, 10.0)
			require.LessOrEqual(t, trips, 10.0)
		})
	}
}

// BenchmarkHeartbeat reports the statements and round trips per heartbeat
// interval that keeping runs in flight costs, batched (the default) and
// with a heartbeat per run, for 10, 100 and 1,000 runs. Each iteration
// measures three intervals of 5s.
func BenchmarkHeartbeat(b *testing.B) {
	for _, d := range testdb.Dialects() {
		for _, mode := range []string{"batched", "unbatched"} {
			for _, runs := range []int{10, 100, 1000} {
				b.Run(fmt.Sprintf("%s/%s/runs=%d", d, mode, runs), func(b *testing.B) {
					var stmts, trips float64
					for range b.N {
						s, t := heartbeatCost(b, d, runs, 3, mode == "unbatched")
						stmts, trips = stmts+s, trips+t
					}
					b.ReportMetric(stmts/float64(b.N), "stmts/interval")
					b.ReportMetric(trips/float64(b.N), "roundtrips/interval")
				})
			}
		}
	}
}
