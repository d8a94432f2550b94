package heartbeat_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// BenchmarkBatcherRound reports what one round of a Batcher costs when it
// keeps 1,000 to 10,000 leases of one table, one Supervisor each:
// statements (one per engine.MaxBatch leases) and round trips (on MySQL,
// BEGIN and COMMIT around each statement as well), counted at the driver
// over whole rounds. An op is one round, one interval (2s): the figures
// are the metrics, not the time.
//
//	go test -run '^$' -bench BatcherRound ./heartbeat/
func BenchmarkBatcherRound(b *testing.B) {
	for _, d := range testdb.Dialects() {
		for _, n := range []int{1000, 2000, 5000, 10000} {
			b.Run(fmt.Sprintf("%s/leases=%d", d, n), func(b *testing.B) {
				benchmarkBatcherRound(b, d, n)
			})
		}
	}
}

func benchmarkBatcherRound(b *testing.B, d lease.Dialect, n int) {
	// The TTL leaves the renewals many intervals of room: the benchmark
	// counts statements, and a round of 10,000 leases on a loaded machine
	// takes most of a second.
	const interval, ttl = 2 * time.Second, 30 * time.Second
	c := &countdb.Counter{}
	db := testdb.OpenWith(b, d, func(driver, dsn string) (*sql.DB, error) { return countdb.OpenDB(driver, dsn, c) })
	e := conformance.Setup(b, db, lease.Options{})
	// AfterRound ends each round, on the Batcher's goroutine, once its
	// statements have returned: the counts taken there split the rounds
	// exactly.
	type mark struct{ st countdb.Stats }
	marks := make(chan mark, 64)
	bat, err := heartbeat.NewBatcher(heartbeat.BatchConfig{Interval: interval, AfterRound: func(context.Context, lease.DB) {
		select {
		case marks <- mark{c.Stats()}:
		default:
		}
	}})
	if err != nil {
		b.Fatal(err)
	}
	var lost atomic.Int64
	onEvent := func(ev heartbeat.Event) {
		if ev.Kind == heartbeat.EventLost {
			lost.Add(1)
		}
	}
	ctx := context.Background()
	sups := make([]*heartbeat.Supervisor, n)
	b.Cleanup(func() {
		for _, s := range sups {
			if s != nil {
				s.Stop()
			}
		}
		wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = bat.Wait(wctx)
	})
	// Leases are taken and supervised by eight goroutines, as traffic
	// would arrive; the first error stops the benchmark.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				k := "k" + strconv.Itoa(i)
				if err := e.Lease.Ensure(ctx, e.DB, k, lease.CreateOptions{}); err != nil {
					errs <- err
					return
				}
				g, err := e.Lease.Acquire(ctx, e.DB, k, "bench", ttl)
				if err != nil {
					errs <- err
					return
				}
				s, err := heartbeat.New(heartbeat.Config{Interval: interval, TTL: ttl, Batcher: bat, OnEvent: onEvent})
				if err != nil {
					errs <- err
					return
				}
				s.Add(heartbeat.ForLease("item", e.Lease, e.DB, g))
				if _, err := s.Start(ctx); err != nil {
					errs <- err
					return
				}
				sups[i] = s
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	// The round under way when the last lease was added may not renew
	// it: count from the end of the round after it.
	next := func() mark {
		t := time.NewTimer(5 * interval)
		defer t.Stop()
		select {
		case m := <-marks:
			return m
		case <-t.C:
			b.Fatalf("no round ended within %v (%d leases lost)", 5*interval, lost.Load())
		}
		return mark{}
	}
	for len(marks) > 0 {
		<-marks
	}
	next()
	from := next().st
	b.ResetTimer()
	var to countdb.Stats
	for range b.N {
		to = next().st
	}
	b.StopTimer()
	if l := lost.Load(); l > 0 {
		b.Fatalf("%d leases lost", l)
	}
	trips := func(s countdb.Stats) int64 { return s.Statements + s.Begins + s.Commits + s.Rollbacks + s.Prepares }
	b.ReportMetric(float64(to.Statements-from.Statements)/float64(b.N), "stmts/round")
	b.ReportMetric(float64(trips(to)-trips(from))/float64(b.N), "roundtrips/round")
	b.ReportMetric(float64((n+engine.MaxBatch-1)/engine.MaxBatch), "chunks")
}
