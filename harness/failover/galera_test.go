//go:build failover

package failover

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/rowlease/rowlease/harness/chaos"
	"github.com/rowlease/rowlease/harness/galera"
	"github.com/rowlease/rowlease/httpapi"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// fault is one node fault of the Galera run.
type fault struct {
	node     int
	kind     string // "kill" or "cut"
	from, to time.Time
	// A cut: what a client of the cut-off node saw, from a probe that
	// reads on it every 20ms from the cut until it is served again.
	refused     int           // statements refused with 1047
	lockWait    int           // statements that waited out innodb_lock_wait_timeout (1205) while the cluster stalled
	not503      int           // errors httpapi.ProblemFor does not answer 503
	unknown     []string      // their texts
	firstRefuse time.Duration // from the cut to the first 1047
	served      time.Duration // from letting it back to the first read served
}

// probe reads on node i every 20ms until stop, recording the refusals.
func probe(ctx context.Context, db *sql.DB, cut time.Time, back <-chan time.Time, f *fault) {
	var backAt time.Time
	for {
		select {
		case b := <-back:
			backAt = b
			back = nil
		default:
		}
		var n int
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+schema.SessionTable).Scan(&n)
		switch {
		case err == nil && !backAt.IsZero():
			f.served = time.Since(backAt)
			return
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			var my *mysql.MySQLError
			if errors.As(err, &my) && my.Number == 1047 {
				if f.refused == 0 {
					f.firstRefuse = time.Since(cut)
				}
				f.refused++
			}
			if errors.As(err, &my) && my.Number == 1205 {
				f.lockWait++
			}
			if httpapi.ProblemFor(err).Status != http.StatusServiceUnavailable {
				f.not503++
				f.unknown = append(f.unknown, err.Error())
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestGaleraNodeFaults runs the crash matrix with worker processes spread
// over the three nodes (one node per process) while, at random instants
// of the flow, one node is killed with SIGKILL and started again (it
// rejoins by IST), or cut off from the others (gmcast.isolate) and let
// back. Then: no stale fenced write, no duplicate effect, every message
// answered on resend with its own reply, no false loss (a lease found
// gone by a worker whose node was not faulted while it ran), and a client
// of a cut-off node sees 1047, which httpapi.IsUnavailable recognises.
func TestGaleraNodeFaults(t *testing.T) {
	dir := os.Getenv(DirEnv)
	if dir == "" {
		t.Skip("failover: " + DirEnv + " not set (make test-failover starts a cluster)")
	}
	nodes := GaleraNodes{Dir: dir}
	faults := envInt("FAILOVER_KILLS", 5)
	rng := rand.New(rand.NewPCG(seed(t), 7))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cfgs := galera.Database(t, nil)
	setup := galera.OpenNode(t, cfgs, 0)
	if err := schema.Apply(ctx, setup, lease.MySQL); err != nil {
		t.Fatal(err)
	}
	if err := chaos.CreateEffectsTable(ctx, setup); err != nil {
		t.Fatal(err)
	}
	galera.Sync(t, cfgs)
	var dsns []string
	for _, c := range cfgs {
		dsns = append(dsns, c.FormatDSN())
	}
	// The checks read causally, on whichever node answers.
	causal := make([]*mysql.Config, len(cfgs))
	for i, c := range cfgs {
		cc := c.Clone()
		cc.Params["wsrep_sync_wait"] = "15"
		causal[i] = cc
	}
	direct := galera.Open(t, causal, galera.PerConnection)
	env := &chaos.Env{Dialect: lease.MySQL, Direct: direct, Faulty: direct, DSN: dsns[0], DirectDSN: dsns[0],
		WorkerDSNs: dsns, MultiPrimary: true}

	var mu sync.Mutex
	var done []*fault
	inject := func() error {
		mu.Lock()
		k := len(done)
		mu.Unlock()
		// Kills and cuts alternate, on a node drawn at random.
		f := &fault{node: rng.IntN(3), kind: "kill", from: time.Now()}
		if k%2 == 1 {
			f.kind = "cut"
		}
		hold := 500*time.Millisecond + time.Duration(rng.Int64N(int64(2500*time.Millisecond)))
		if f.kind == "kill" {
			if err := nodes.Kill(f.node); err != nil {
				return err
			}
			time.Sleep(hold)
			if err := nodes.Start(ctx, f.node); err != nil {
				return err
			}
		} else {
			db, err := sql.Open("mysql", cfgs[f.node].FormatDSN())
			if err != nil {
				return err
			}
			db.SetMaxOpenConns(1)
			var one int
			if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
				db.Close()
				return err
			}
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Minute)
			back := make(chan time.Time, 1)
			var pw sync.WaitGroup
			cut := time.Now()
			if err := nodes.Isolate(ctx, f.node, true); err != nil {
				pcancel()
				db.Close()
				return err
			}
			pw.Go(func() { probe(pctx, db, cut, back, f) })
			// Hold the cut at least until the node has left the primary
			// component (its clients are refused), then some more.
			time.Sleep(hold + 6*time.Second)
			if err := nodes.Isolate(ctx, f.node, false); err != nil {
				pcancel()
				pw.Wait()
				db.Close()
				return err
			}
			back <- time.Now()
			pw.Wait()
			pcancel()
			db.Close()
		}
		for i := range 3 {
			if err := nodes.WaitSynced(ctx, i, 3); err != nil {
				return err
			}
		}
		f.to = time.Now()
		mu.Lock()
		done = append(done, f)
		mu.Unlock()
		return nil
	}
	ttl := time.Duration(envInt("FAILOVER_TTL", 15)) * time.Second
	rep, err := chaos.RunCrash(ctx, chaos.CrashConfig{
		Env: env, Sessions: 12, PerSession: 1, Procs: 4, TTL: ttl, MaxRounds: 100000,
		Restart: inject, Restarts: faults,
		RestartDelay: func() time.Duration { return 500*time.Millisecond + time.Duration(rng.Int64N(int64(2*time.Second))) },
		Verify:       true, Dwell: 400 * time.Millisecond, InFlow: true,
		Log: func(format string, args ...any) {
			if !strings.Contains(format, "round") {
				t.Logf(format, args...)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(done) < faults {
		for _, e := range rep.Errors {
			t.Error(e)
		}
		t.Fatalf("%d faults, want %d", len(done), faults)
	}
	// A loss is false when the worker's node was not faulted while it ran.
	falseLoss, deadlineLoss, faultedLoss := 0, 0, 0
	for _, l := range rep.Losses {
		faulted := false
		for _, f := range done {
			if f.node == l.Node && l.Start.Before(f.to.Add(ttl)) && l.End.After(f.from) {
				faulted = true
			}
		}
		switch {
		case faulted:
			faultedLoss++
		case !l.Gone:
			deadlineLoss++
		default:
			falseLoss++
			t.Errorf("false loss on node %d: %s", l.Node, l.Msg)
		}
	}
	kinds := map[string]int{}
	var recover, firstRefuse, served []time.Duration
	refused, lockWait, not503 := 0, 0, 0
	for _, f := range done {
		kinds[f.kind]++
		recover = append(recover, f.to.Sub(f.from))
		if f.kind == "cut" {
			refused += f.refused
			lockWait += f.lockWait
			not503 += f.not503
			for _, u := range f.unknown {
				t.Errorf("a client of the cut-off node saw an error httpapi does not answer 503: %s", u)
			}
			if f.refused > 0 {
				firstRefuse = append(firstRefuse, f.firstRefuse)
			}
			served = append(served, f.served)
		}
	}
	t.Logf("failover galera: %d faults %v landed at %v", len(done), kinds, rep.RestartLanded)
	t.Logf("failover galera: fault → the node Synced again %s; cut-off node: %d reads refused with 1047, %d ran into the lock wait timeout (1205) while the cluster stalled, %d errors not answered 503; cut → first 1047 %s, let back → served again %s",
		stats(recover), refused, lockWait, not503, stats(firstRefuse), stats(served))
	t.Logf("failover galera: errors answered instead of a reply (resent): %v", rep.Refusals)
	for msg, n := range rep.Others {
		t.Logf("failover galera: %d× %s", n, msg)
	}
	t.Logf("failover summary: galera ttl=%s faults=%d requests=%d answered=%d verified=%d | stale=%d dup-db=%d dup-ext=%d unanswered=%d | losses: false=%d on-a-faulted-node=%d trust-deadline=%d | lost: tool-calls=%d replies=%d | still-held=%d stuck=%d",
		ttl, len(done), rep.Requests, rep.Answered, rep.Verified, rep.Stale, rep.DBDuplicates, rep.ExtDuplicates, rep.Unanswered,
		falseLoss, faultedLoss, deadlineLoss, rep.LostPosts, rep.Reruns, rep.StillHeld, rep.StuckTools)
	for _, e := range rep.Errors {
		t.Error(e)
	}
	if rep.Stale+rep.Duplicates+rep.Unanswered+rep.LostPosts+rep.Reruns+rep.StillHeld+rep.StuckTools+falseLoss+not503 > 0 {
		t.Fatal("an invariant does not hold under node faults")
	}
	if kinds["cut"] > 0 && refused == 0 {
		t.Fatal("no client of a cut-off node was refused: the cut did not take")
	}
}
