package chaos

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rowlease/rowlease/internal/testkit/faults"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// Environment of the long run (make chaos).
const (
	longEnv  = "ROWLEASE_CHAOS_LONG"  // set: run TestChaos
	opsEnv   = "ROWLEASE_CHAOS_OPS"   // lease operations in all, across the dialects (default 1,000,000)
	killsEnv = "ROWLEASE_CHAOS_KILLS" // holder kills in all (default 1,000)
)

// slowCheck reports whether a round's porcupine check (its last argument)
// took a second or more: such rounds are logged.
func slowCheck(args []any) bool {
	if len(args) == 0 {
		return false
	}
	d, ok := args[len(args)-1].(time.Duration)
	return ok && d >= time.Second
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestChaos is the long run behind make chaos: per dialect, in parallel,
// lease histories under every fault the dialect allows (server restarts
// included, when scripts/test.sh exported how), checked with porcupine;
// then the crash matrix with holder kills (and server restarts); then
// paused holders. It prints one summary line per dialect.
func TestChaos(t *testing.T) {
	if os.Getenv(longEnv) == "" {
		t.Skip("the long run; make chaos runs it (" + longEnv + "=1)")
	}
	ops := envInt(opsEnv, 1_000_000)
	kills := envInt(killsEnv, 1_000)
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			restart := faults.Restarter(d)
			if d != lease.SQLite && restart == nil {
				t.Fatalf("no restart script for %s: run it through make chaos", d)
			}
			start := time.Now()
			e := OpenEnv(t, d)
			if err := CreateTables(ctx, e.Direct, d); err != nil {
				t.Fatal(err)
			}
			rounds := 0
			lrep, err := RunLease(ctx, LeaseConfig{
				Dialect: d, DB: e.Faulty, Direct: e.Direct, Proxy: e.Proxy,
				Injector: faults.InjectorConfig{Every: 100 * time.Millisecond, Blackhole: 400 * time.Millisecond, Restart: restart, RestartOneIn: 150},
				Ops:      (ops + len(testdb.Dialects()) - 1) / len(testdb.Dialects()), Keys: 8, Workers: 3, OpsPerKey: 600, CancelOneIn: 100,
				OpTimeout: 3 * time.Second, Quiesce: e.Quiesce, FailDir: FailDir(),
				Log: func(format string, args ...any) {
					rounds++
					if rounds%20 == 0 || strings.Contains(format, "not") || slowCheck(args) {
						t.Logf("chaos progress: "+format, args...)
					}
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			leaseTook := time.Since(start)

			ce := openCrashEnv(t, ctx, d.String())
			crep, err := RunCrash(ctx, CrashConfig{Env: ce, Sessions: 4, PerSession: 3, Procs: 4, KillOneIn: 2,
				Kills: (kills + len(testdb.Dialects()) - 1) / len(testdb.Dialects()), TTL: 800 * time.Millisecond, MaxRounds: kills + 50,
				Restart: restart, RestartEvery: 20 * time.Second,
				Log: func(format string, args ...any) { t.Logf("chaos progress: "+format, args...) }})
			if err != nil {
				t.Fatal(err)
			}
			pauses := 0
			pe := openCrashEnv(t, ctx, d.String())
			recv := NewReceiver()
			defer recv.Close()
			points := []string{StageToolTx, StageActed}
			if d == lease.SQLite {
				points = []string{StageAgent, StageActed}
			}
			for i := range 10 {
				runPaused(t, ctx, pe, recv, points[i%2], fmt.Sprintf("p%d", i))
				pauses++
			}
			prep := CrashReport{Kills: map[string]int{}}
			if err := checkInvariants(ctx, pe, recv, 800*time.Millisecond, &prep); err != nil {
				t.Fatal(err)
			}

			f := lrep.Faults
			f[faults.Restart] += int64(crep.Restarts)
			f[faults.Kill] = int64(crep.TotalKills())
			f[faults.Pause] = int64(pauses)
			var kinds []string
			for _, k := range []faults.Kind{faults.CutStatement, faults.CutCommit, faults.Latency, faults.Blackhole, faults.Reset, faults.Restart, faults.Cancel, faults.Kill, faults.Pause} {
				kinds = append(kinds, fmt.Sprintf("%s=%d", k, f[k]))
			}
			viol := lrep.Violations + lrep.Undecided
			dup := crep.Duplicates + prep.Duplicates
			stuck := crep.StuckTools + prep.StuckTools + crep.StillHeld + prep.StillHeld
			t.Logf("chaos summary: %-8s ops=%d (unknown %d, fenced writes %d, %.0f ops/s) faults[%s] violations=%d duplicates=%d unanswered=%d stuck=%d requests=%d took=%s",
				d, lrep.Ops, lrep.Unknown, lrep.Fenced, float64(lrep.Ops)/leaseTook.Seconds(), strings.Join(kinds, " "),
				viol, dup, crep.Unanswered, stuck, crep.Requests, time.Since(start).Round(time.Second))
			t.Logf("chaos kills %s: %v; errors answered instead of a reply (resent): %v", d, crep.Kills, crep.Refusals)
			for msg, n := range crep.Others {
				t.Logf("chaos other errors %s: %d× %s", d, n, msg)
			}
			for _, e := range append(append(lrep.Errors, crep.Errors...), prep.Errors...) {
				t.Error(e)
			}
			if viol+dup+crep.Unanswered+stuck > 0 {
				t.Fatal("a guarantee did not hold under faults")
			}
		})
	}
}
