package engine_test

import (
	"context"
	"testing"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/proccpu"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// BenchmarkJointOrAlone confirms three grants on three tables per
// iteration, as the end of a tool call's transaction does: joint, with
// engine.Joint (one statement on PostgreSQL and MySQL), or alone, three
// Confirms. Besides time it reports server-cpu-µs/op: the CPU time of
// the database server's processes on this machine per iteration (Linux,
// a local server; 0 otherwise). On MariaDB the joint multi-table UPDATE
// costs the server more than the three UPDATEs alone, which is why
// RunFenced and request.Runner send their ends one by one on MySQL:
//
//	go test -run '^$' -bench JointOrAlone -benchtime 5000x ./lease/
func BenchmarkJointOrAlone(b *testing.B) {
	for _, d := range testdb.Dialects() {
		for _, mode := range []string{"joint", "alone"} {
			b.Run(d.String()+"/"+mode, func(b *testing.B) {
				e, c := benchEnv(b, d, engine.Options{})
				other, third := e.ItemLike(b, "lease_other"), e.ItemLike(b, "lease_third")
				ctx := context.Background()
				ls := []*engine.Lease[string]{e.Lease, other, third}
				gs := make([]engine.Grant[string], len(ls))
				for i, l := range ls {
					if err := l.Ensure(ctx, e.DB, "k", engine.CreateOptions{}); err != nil {
						b.Fatal(err)
					}
					g, err := l.Acquire(ctx, e.DB, "k", benchHolder, benchTTL)
					if err != nil {
						b.Fatal(err)
					}
					gs[i] = g
				}
				ops := []engine.JointOp{engine.ConfirmOp(ls[0], gs[0]), engine.ConfirmOp(ls[1], gs[1]), engine.ConfirmOp(ls[2], gs[2])}
				c.Reset()
				srv0 := proccpu.Named(proccpu.ServerNames[d.String()]...)
				b.ResetTimer()
				for range b.N {
					if mode == "joint" {
						for _, err := range engine.Joint(ctx, e.DB, ops...) {
							if err != nil {
								b.Fatal(err)
							}
						}
						continue
					}
					for i, l := range ls {
						if _, err := l.Confirm(ctx, e.DB, gs[i]); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StopTimer()
				srv := proccpu.Named(proccpu.ServerNames[d.String()]...) - srv0
				b.ReportMetric(float64(srv.Microseconds())/float64(b.N), "server-cpu-µs/op")
				reportStmts(b, c)
			})
		}
	}
}
