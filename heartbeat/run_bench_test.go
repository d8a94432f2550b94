package heartbeat_test

import (
	"context"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// BenchmarkSupervisedRun is what the supervision of one short run costs
// the client, with a Batcher as request.Runner has by default: a
// Supervisor made and started, a session and a request lease added, a
// tool lease added and removed, and Stop; with no other run in flight, and
// beside 64 others (each with two leases), as at 64 concurrent sessions.
// No lease comes due within an op: it measures the bookkeeping, not the
// renewals. It reports the goroutines started per op.
func BenchmarkSupervisedRun(b *testing.B) {
	for _, others := range []int{0, 64} {
		b.Run("others="+strconv.Itoa(others), func(b *testing.B) {
			const interval, ttl = 10 * time.Second, 30 * time.Second
			db := testdb.Open(b, lease.SQLite) // never queried: it keys the batches
			tbl, err := lease.NewTable("bench_lease", lease.Columns{Key: "k", Holder: "holder", Token: "token", ExpiresAt: "expires_at", Generation: "generation"})
			if err != nil {
				b.Fatal(err)
			}
			l, err := lease.New[string](lease.SQLite, tbl, lease.Options{})
			if err != nil {
				b.Fatal(err)
			}
			bat, err := heartbeat.NewBatcher(heartbeat.BatchConfig{Interval: interval})
			if err != nil {
				b.Fatal(err)
			}
			grant := func(k string) lease.Grant[string] {
				return lease.Grant[string]{Key: k, Generation: 1, TTL: ttl, Deadline: time.Now().Add(ttl - time.Second)}
			}
			flow := engine.NewFlowDB(db, lease.SQLite)
			cfg := heartbeat.Config{Interval: interval, TTL: ttl, Batcher: bat}
			ctx := context.Background()
			// Cleanups run last first: the Batcher is waited for after the
			// others stopped.
			b.Cleanup(func() {
				wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_ = bat.Wait(wctx)
			})
			for i := range others {
				s, err := heartbeat.New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				s.Add(heartbeat.ForLease("session", l, flow, grant("s"+strconv.Itoa(i))))
				s.Add(heartbeat.ForLease("request", l, flow, grant("r"+strconv.Itoa(i))))
				if _, err := s.Start(ctx); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(s.Stop)
			}
			sample := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
			metrics.Read(sample)
			g0 := sample[0].Value.Uint64()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				s, err := heartbeat.New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				k := strconv.Itoa(i)
				s.Add(heartbeat.ForLease("session", l, flow, grant("s"+k)))
				s.Add(heartbeat.ForLease("request", l, flow, grant("r"+k)))
				work, err := s.Start(ctx)
				if err != nil {
					b.Fatal(err)
				}
				remove := s.Add(heartbeat.ForLease("tool:write", l, flow, grant("t"+k)))
				remove()
				s.Stop()
				if s.Lost() != nil || context.Cause(work) != heartbeat.ErrStopped {
					b.Fatalf("run %d: lost %v, cause %v", i, s.Lost(), context.Cause(work))
				}
			}
			b.StopTimer()
			metrics.Read(sample)
			b.ReportMetric(float64(sample[0].Value.Uint64()-g0)/float64(b.N), "goroutines/op")
		})
	}
}
