//go:build failover

package failover

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/rowlease/rowlease/internal/chaos"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

func TestMain(m *testing.M) {
	if os.Getenv(chaos.WorkerEnv) != "" {
		os.Exit(chaos.WorkerMain()) // a worker process of the crash matrix
	}
	os.Exit(m.Run())
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// seed is FAILOVER_SEED, or drawn; it is printed so that the kill
// instants can be replayed.
func seed(t *testing.T) uint64 {
	s, err := strconv.ParseUint(os.Getenv("FAILOVER_SEED"), 10, 64)
	if err != nil {
		s = rand.Uint64()
	}
	t.Logf("failover seed: FAILOVER_SEED=%d", s)
	return s
}

// pgBin is ROWLEASE_PGBIN, or the newest /usr/lib/postgresql/*/bin.
func pgBin(t *testing.T) string {
	if b := os.Getenv("ROWLEASE_PGBIN"); b != "" {
		return b
	}
	ms, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(ms) == 0 {
		t.Skip("failover: no PostgreSQL binaries (make test-failover installs them)")
	}
	sort.Slice(ms, func(i, j int) bool {
		a, _ := strconv.Atoi(strings.Split(ms[i], "/")[4])
		b, _ := strconv.Atoi(strings.Split(ms[j], "/")[4])
		return a < b
	})
	return filepath.Dir(ms[len(ms)-1])
}

// stats sums durations up: median and max.
func stats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return fmt.Sprintf("median %s, max %s", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

// TestPostgresFailover kills the primary at random instants while worker
// processes run the whole request flow, promotes a standby, and checks
// what held: in synchronous mode, no stale fenced write, no duplicate
// effect (database or external), every message answered on resend with
// its own reply, and no committed tool call, grant or reply lost; in
// asynchronous mode the losses are counted per kind. It prints one
// summary line per mode, with the time from the kill to the first
// answered message split into the harness's promotion and the library's
// part.
func TestPostgresFailover(t *testing.T) {
	bin := pgBin(t)
	kills := envInt("FAILOVER_KILLS", 5)
	sd := seed(t)
	for k, mode := range []string{"sync", "async"} {
		t.Run(mode, func(t *testing.T) {
			runPostgres(t, bin, mode == "sync", kills, rand.New(rand.NewPCG(sd, uint64(k))))
		})
	}
}

func runPostgres(t *testing.T, bin string, synchronous bool, kills int, rng *rand.Rand) {
	mode := "async"
	if synchronous {
		mode = "sync"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("/tmp", "rowlease-failover-pg-")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o755)
	t0 := time.Now()
	// FAILOVER_REPL_LATENCY_MS (default 10; 0 for none) delays the
	// replication stream, as a standby in another zone.
	ms := 10
	if v, err := strconv.Atoi(os.Getenv("FAILOVER_REPL_LATENCY_MS")); err == nil && v >= 0 {
		ms = v
	}
	latency := time.Duration(ms) * time.Millisecond
	c, err := NewPGCluster(ctx, bin, dir, synchronous, latency)
	if c != nil {
		defer c.Stop()
	}
	defer func() {
		if t.Failed() && os.Getenv("FAILOVER_KEEP") != "" {
			t.Logf("failover: data and logs kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	}()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover %s: primary and two standbys up in %s (replication stream delayed %s)", mode, time.Since(t0).Round(time.Millisecond), latency)
	db, err := sqlx.Open("pgx", c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := schema.Apply(ctx, db, lease.Postgres); err != nil {
		t.Fatal(err)
	}
	if err := chaos.CreateEffectsTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	env := &chaos.Env{Dialect: lease.Postgres, Direct: db, Faulty: db, DSN: c.DSN(), DirectDSN: c.DSN()}

	type kill struct {
		at time.Time
		f  Failover
	}
	var mu sync.Mutex
	var done []kill
	restart := func() error {
		at, err := c.KillPrimary(0)
		if err != nil {
			return err
		}
		f, err := c.Promote(ctx, at)
		if err != nil {
			return err
		}
		mu.Lock()
		done = append(done, kill{at: at, f: f})
		mu.Unlock()
		return nil
	}
	ttl := time.Duration(envInt("FAILOVER_TTL", 3)) * time.Second
	rep, err := chaos.RunCrash(ctx, chaos.CrashConfig{
		Env: env, Sessions: 12, PerSession: 1, Procs: 4, TTL: ttl, MaxRounds: 100000,
		Restart: restart, Restarts: kills,
		RestartDelay: func() time.Duration {
			return time.Second + time.Duration(rng.Int64N(int64(2500*time.Millisecond)))
		},
		Verify: true,
		Log: func(format string, args ...any) {
			if strings.Contains(format, "round") {
				return
			}
			t.Logf(format, args...)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(done) < kills {
		for _, e := range rep.Errors {
			t.Error(e)
		}
		t.Fatalf("%d failovers, want %d", len(done), kills)
	}
	// From each kill to the first answer after the promotion (an answer
	// that arrives before it was given before the kill).
	var promote, writable, library, first, rebuild []time.Duration
	recloned := 0
	for _, k := range done {
		promote = append(promote, k.f.Promote)
		writable = append(writable, k.f.Writable)
		rebuild = append(rebuild, k.f.Rebuild)
		if k.f.Recloned {
			recloned++
		}
		pa := k.at.Add(k.f.Promote)
		i := sort.Search(len(rep.AnswerTimes), func(i int) bool { return rep.AnswerTimes[i].After(pa) })
		if i == len(rep.AnswerTimes) {
			continue
		}
		d := rep.AnswerTimes[i].Sub(k.at)
		first = append(first, d)
		library = append(library, max(0, d-k.f.Writable))
	}
	lostGone := gone(rep.Losses)
	lostDeadline := len(rep.Losses) - lostGone
	t.Logf("failover %s: %d kills landed at %v", mode, len(done), rep.RestartLanded)
	t.Logf("failover %s: kill → promoted %s; kill → a commit answered on the new primary (harness) %s; then → first answered message (library) %s; kill → first answered message %s; re-cloning the killed node %s; the other standby could not follow and was cloned again %d times",
		mode, stats(promote), stats(writable), stats(library), stats(first), stats(rebuild), recloned)
	t.Logf("failover %s: errors answered instead of a reply (resent): %v", mode, rep.Refusals)
	for msg, n := range rep.Others {
		t.Logf("failover %s: %d× %s", mode, n, msg)
	}
	t.Logf("failover summary: postgres-%s ttl=%s kills=%d requests=%d answered=%d verified=%d | stale=%d dup-db=%d dup-ext=%d unanswered=%d | lost: grants(token gone)=%d tool-calls=%d replies=%d intents(acted again under a new key)=%d | runs aborted at their trust deadline=%d | still-held=%d stuck=%d",
		mode, ttl, len(done), rep.Requests, rep.Answered, rep.Verified, rep.Stale, rep.DBDuplicates, rep.ExtDuplicates, rep.Unanswered,
		lostGone, rep.LostPosts, rep.Reruns, rep.ExtDuplicates, lostDeadline, rep.StillHeld, rep.StuckTools)
	if rep.Unanswered > 0 || rep.Stale > 0 {
		for _, e := range rep.Errors {
			t.Error(e)
		}
		t.Fatal("a message went unanswered or a stale fenced write committed")
	}
	if synchronous {
		for _, e := range rep.Errors {
			t.Error(e)
		}
		if rep.DBDuplicates+rep.ExtDuplicates+rep.LostPosts+rep.Reruns+rep.StillHeld+rep.StuckTools > 0 {
			t.Fatal("synchronous replication: an invariant does not hold over a failover")
		}
		if n := gone(rep.Losses); n > 0 {
			t.Fatalf("synchronous replication: %d leases found their token gone after a failover", n)
		}
	}
}

// gone counts the losses where a renewal or a fenced write found the
// token gone (not a trust deadline that passed while the database was
// away).
func gone(losses []chaos.Loss) int {
	n := 0
	for _, l := range losses {
		if l.Gone {
			n++
		}
	}
	return n
}
