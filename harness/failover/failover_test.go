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

	"github.com/rowlease/rowlease/harness/chaos"
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
// its own reply, no committed tool call, grant, intent or reply lost, and
// every database error a client got answered 503 by httpapi; in
// asynchronous mode (the replication stream cut for a while before each
// kill) the losses are counted per kind against what the workers were
// told had committed. It prints one summary line per mode, and the time
// from the kill to the first answered message split into the harness's
// steps and the library's part. FAILOVER_MODE=sync or async runs one
// mode.
func TestPostgresFailover(t *testing.T) {
	bin := pgBin(t)
	kills := envInt("FAILOVER_KILLS", 5)
	sd := seed(t)
	for k, mode := range []string{"sync", "async"} {
		if m := os.Getenv("FAILOVER_MODE"); m != "" && m != mode {
			continue // FAILOVER_MODE=sync or async runs one mode
		}
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
	// FAILOVER_RUN_MINUTES bounds one mode's run (30 by default): a run
	// that has not answered every request and made every restart by then
	// fails, naming what it still waited for.
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(envInt("FAILOVER_RUN_MINUTES", 30))*time.Minute)
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
	// Removed after the servers stopped (deferred calls run in reverse):
	// a server still running writes into its directory again.
	defer func() {
		if t.Failed() && os.Getenv("FAILOVER_KEEP") != "" {
			t.Logf("failover: data and logs kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	}()
	c, err := NewPGCluster(ctx, bin, dir, synchronous, latency)
	if c != nil {
		defer c.Stop()
	}
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

	// Asynchronous: the replication stream is cut for a random while,
	// up to FAILOVER_ASYNC_LAG_MS (default 1000), before each kill, as a
	// standby that lags when its primary dies: the acknowledged tail lost
	// with the primary is what this mode measures.
	maxLag := time.Duration(0)
	if !synchronous {
		maxLag = time.Duration(envInt("FAILOVER_ASYNC_LAG_MS", 1000)) * time.Millisecond
	}
	type kill struct {
		at  time.Time
		lag time.Duration
		f   Failover
	}
	var mu sync.Mutex
	var done []kill
	restart := func() error {
		var lag time.Duration
		if maxLag > 0 {
			lag = time.Duration(rng.Int64N(int64(maxLag)))
		}
		at, err := c.KillPrimary(lag)
		if err != nil {
			return err
		}
		f, err := c.Promote(ctx, at)
		if err != nil {
			return err
		}
		mu.Lock()
		done = append(done, kill{at: at, lag: lag, f: f})
		mu.Unlock()
		return nil
	}
	ttl := time.Duration(envInt("FAILOVER_TTL", 3)) * time.Second
	cfg := chaos.CrashConfig{
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
	}
	if !synchronous {
		// Asynchronous commits are quick: each stage lasts a while, and a
		// kill waits for a worker inside a flow, so that the lost tail
		// holds grants, tool calls, intents and replies, not only
		// messages between two others.
		cfg.Dwell, cfg.InFlow = 300*time.Millisecond, true
	}
	rep, err := chaos.RunCrash(ctx, cfg)
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
	// that arrives before it was given before the kill). The harness's
	// part ends when a commit is answered on the new primary; the rest is
	// the library's (pgx finding the new primary, resent messages waiting
	// for their leases).
	var gone, stopped, promote, repointed, writable, library, first, rebuild, lags []time.Duration
	restarted, recloned := 0, 0
	for _, k := range done {
		gone = append(gone, k.f.Gone)
		stopped = append(stopped, k.f.Stopped)
		promote = append(promote, k.f.Promote)
		if k.f.Repointed > 0 {
			repointed = append(repointed, k.f.Repointed)
		}
		writable = append(writable, k.f.Writable)
		rebuild = append(rebuild, k.f.Rebuild)
		lags = append(lags, k.lag)
		if k.f.Restarted {
			restarted++
		}
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
	l, err := countLost(ctx, env, rep)
	if err != nil {
		t.Fatal(err)
	}
	lostDeadline := len(rep.Losses) - l.tokenGone
	t.Logf("failover %s: %d kills landed at %v", mode, len(done), rep.RestartLanded)
	if maxLag > 0 {
		t.Logf("failover %s: replication stream cut before each kill for %s", mode, stats(lags))
	}
	t.Logf("failover %s: from the kill (harness): processes gone %s; no standby receiving %s; promoted %s; the other standby streams from it %s (reload; restarted %d, cloned again %d times); a commit answered on the new primary %s",
		mode, stats(gone), stats(stopped), stats(promote), stats(repointed), restarted, recloned, stats(writable))
	t.Logf("failover %s: split: kill → a commit answered on the new primary (harness) %s; then → first answered message (library) %s; kill → first answered message %s; re-cloning the killed node afterwards %s",
		mode, stats(writable), stats(library), stats(first), stats(rebuild))
	t.Logf("failover %s: errors answered instead of a reply (resent): %v; by class and HTTP status: %v", mode, rep.Refusals, rep.Statuses)
	for msg, n := range rep.Others {
		t.Logf("failover %s: %d× %s", mode, n, msg)
	}
	notUnavailable := 0
	for k, n := range rep.Statuses {
		class, status, _ := strings.Cut(k, " ")
		if (class == "other" || class == "agent-failed") && status != "503" {
			notUnavailable += n
		}
	}
	t.Logf("failover summary: postgres-%s ttl=%s kills=%d requests=%d answered=%d verified=%d | stale=%d dup-db=%d dup-ext=%d unanswered=%d | database errors not answered 503: %d | lost: grants=%d (request rows gone %d, generations given twice: request %d, session %d; holders that found their token gone %d) tool-calls=%d replies=%d intents=%d (acted again under a new key %d) | runs aborted at their trust deadline=%d | still-held=%d stuck=%d (their request row gone: %d)",
		mode, ttl, len(done), rep.Requests, rep.Answered, rep.Verified, rep.Stale, rep.DBDuplicates, rep.ExtDuplicates, rep.Unanswered,
		notUnavailable, l.grants(), l.requestRows, l.requestGens, l.sessionGens, l.tokenGone, rep.LostPosts, rep.Reruns, l.intents, rep.ExtDuplicates,
		lostDeadline, rep.StillHeld, rep.StuckTools, l.orphans)
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
		if l.grants()+l.intents+l.tokenGone > 0 {
			t.Fatalf("synchronous replication: grants or intents lost over a failover: %+v", l)
		}
		if notUnavailable > 0 {
			t.Fatalf("synchronous replication: %d database errors were not answered 503 (listed above)", notUnavailable)
		}
	}
}

// lost counts what the promoted servers lack of what workers were told
// had committed.
type lost struct {
	// Grants: the request rows a run was granted that are gone (the
	// grant was lost with its row: the resend made another request),
	// and the generations of a request or a session given to two runs
	// (the first grant was lost, and the generation issued again).
	requestRows, requestGens, sessionGens int
	// tokenGone: runs whose renewal or fenced write found their token
	// gone (not a trust deadline that passed while the database was away).
	tokenGone int
	// intents: effect keys acted under (their intent had committed)
	// whose tool execution row is gone.
	intents int
	// orphans: tool executions left processing or started whose request
	// row is gone: inserted on the promoted server by a run whose
	// request was lost with the tail (a new call's insert is not fenced).
	orphans int
}

func (l lost) grants() int { return l.requestRows + l.requestGens + l.sessionGens }

// countLost compares what the workers reported with the database.
func countLost(ctx context.Context, env *chaos.Env, rep chaos.CrashReport) (lost, error) {
	var l lost
	for _, x := range rep.Losses {
		if x.Gone {
			l.tokenGone++
		}
	}
	ids := func(table string) (map[string]bool, error) {
		rows, err := env.Direct.QueryContext(ctx, "SELECT id FROM "+table)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		out := map[string]bool{}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return nil, err
			}
			out[id] = true
		}
		return out, rows.Err()
	}
	reqs, err := ids(schema.RequestTable)
	if err != nil {
		return l, err
	}
	execs, err := ids(schema.ToolExecutionTable)
	if err != nil {
		return l, err
	}
	goneReq := map[string]bool{}
	reqGen, sessGen := map[string]int{}, map[string]int{}
	for _, g := range rep.Grants {
		if !reqs[g.RequestID] {
			goneReq[g.RequestID] = true
		}
		reqGen[g.RequestID+"/"+strconv.FormatInt(g.RequestGen, 10)]++
		sessGen[g.Session+"/"+strconv.FormatInt(g.SessionGen, 10)]++
	}
	l.requestRows = len(goneReq)
	for _, n := range reqGen {
		l.requestGens += n - 1
	}
	for _, n := range sessGen {
		l.sessionGens += n - 1
	}
	goneKeys := map[string]bool{}
	for _, x := range rep.Intents {
		if !execs[x.Key] {
			goneKeys[x.Key] = true
		}
	}
	l.intents = len(goneKeys)
	q := "SELECT COUNT(*) FROM " + schema.ToolExecutionTable + " x WHERE x." + schema.ColStatus + " IN ('processing', 'started') AND NOT EXISTS (SELECT 1 FROM " +
		schema.RequestTable + " r WHERE r." + schema.ColID + " = x." + schema.ColRequestID + ")"
	if err := env.Direct.QueryRowContext(ctx, q).Scan(&l.orphans); err != nil {
		return l, err
	}
	return l, nil
}
