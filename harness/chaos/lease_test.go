package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/rowlease/rowlease/internal/testkit/faults"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// TestLeaseLinearizable records short lease histories on every dialect —
// acquire, reentry, renew, release, transition, fenced writes, reads and
// the test's own expiries, from many goroutines — while the proxy cuts
// statements and commits, adds latency, blackholes and resets connections
// (MySQL, PostgreSQL) and contexts are cancelled mid-statement (all), and
// checks them with porcupine against the lease model.
//
// The run is sized by time as well as by count: up to 3,000 operations,
// but no round starts after 40s, so a loaded machine checks fewer
// operations instead of failing at a deadline. The deadline (10 minutes)
// only guards against a hang; the log says how long the run took.
func TestLeaseLinearizable(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			e := OpenEnv(t, d)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			if err := CreateTables(ctx, e.Direct, d); err != nil {
				t.Fatal(err)
			}
			rep, err := RunLease(ctx, LeaseConfig{
				Dialect: d, DB: e.Faulty, Direct: e.Direct, Proxy: e.Proxy,
				Injector: faults.InjectorConfig{Every: 60 * time.Millisecond, Blackhole: 300 * time.Millisecond},
				Ops:      3000, Budget: 40 * time.Second, Keys: 6, Workers: 3, OpsPerKey: 240, CancelOneIn: 50,
				OpTimeout: 2 * time.Second, Quiesce: e.Quiesce, FailDir: t.TempDir(), Log: t.Logf,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d ops in %d rounds in %s (stopped by the time budget: %v), %d unknown, %d fenced writes committed, faults %v",
				d, rep.Ops, rep.Rounds, rep.Elapsed.Round(time.Second), rep.Budgeted, rep.Unknown, rep.Fenced, rep.Faults)
			for _, e := range rep.Errors {
				t.Error(e)
			}
			if rep.Violations > 0 || rep.Undecided > 0 {
				t.Fatalf("%d violations, %d undecided", rep.Violations, rep.Undecided)
			}
			if rep.Fenced == 0 {
				t.Error("no fenced write committed: the history checks nothing of the fence")
			}
			// A cut statement or a cut commit: either leaves an outcome
			// unknown (a fast machine finishes a round before the injector
			// has cut many statements).
			if d != lease.SQLite && (rep.Faults[faults.CutStatement]+rep.Faults[faults.CutCommit] == 0 || rep.Unknown == 0) {
				t.Errorf("faults %v, %d unknown outcomes: the proxy injected too little", rep.Faults, rep.Unknown)
			}
		})
	}
}
