package chaos

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jmoiron/sqlx"

	"github.com/rowlease/rowlease/internal/engine"
	wait "github.com/rowlease/rowlease/internal/retry"
	"github.com/rowlease/rowlease/internal/testkit/faults"
	"github.com/rowlease/rowlease/lease"
)

// LeaseTable is the table the lease histories run on: a key, the lease
// columns and a state column ('a' or 'b').
const LeaseTable = "chaos_lease"

// LedgerTable holds the fenced side-effect writes: one row per fenced
// write that committed, carrying the generation its writer held.
const LedgerTable = "chaos_ledger"

// longTTL is the TTL of every grant: no lease expires by time during a
// round; only the test's OpExpire expires one.
const longTTL = time.Hour

var leaseCols = lease.Columns{Key: "k", Holder: "holder", Token: "token", ExpiresAt: "expires_at", Generation: "generation", State: "state"}

// CreateTables creates the lease and ledger tables on db in dialect d.
func CreateTables(ctx context.Context, db *sqlx.DB, d lease.Dialect) error {
	var ts, extra string
	switch d {
	case lease.MySQL:
		ts, extra = "DATETIME(6)", " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
	case lease.Postgres:
		ts = "TIMESTAMPTZ"
	default:
		ts = "INTEGER"
	}
	stmts := []string{
		"CREATE TABLE " + LeaseTable + " (k VARCHAR(64) NOT NULL PRIMARY KEY, holder VARCHAR(191) NULL, token VARCHAR(36) NULL, " +
			"expires_at " + ts + " NULL, generation BIGINT NOT NULL DEFAULT 0, state VARCHAR(16) NOT NULL DEFAULT 'a')" + extra,
		"CREATE TABLE " + LedgerTable + " (id VARCHAR(64) NOT NULL PRIMARY KEY, k VARCHAR(64) NOT NULL, gen BIGINT NOT NULL, tok BIGINT NOT NULL)" + extra,
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("chaos: %s: %w", s[:30], err)
		}
	}
	return nil
}

// LeaseConfig configures RunLease.
type LeaseConfig struct {
	Dialect lease.Dialect
	// DB is the pool the workers use: through Proxy on MySQL and
	// PostgreSQL. Direct reaches the same database without faults (setup,
	// expiries, the final reads); it may be DB itself on SQLite.
	DB, Direct *sqlx.DB
	// Proxy, when set, is struck with random faults while a round runs.
	Proxy *faults.Proxy
	// Injector configures the proxy's faults (Restart included).
	Injector faults.InjectorConfig
	// Ops is the number of operations to record in all (at least).
	Ops int
	// Budget, when set, sizes the run by time as well: no round starts
	// once Budget has passed since RunLease began, whatever Ops says. At
	// least one round always runs to its end. A loaded machine then
	// records fewer operations instead of running into ctx's deadline;
	// the report says how many it recorded and how long it took.
	Budget time.Duration
	// Keys per round, Workers per key, and operations per key and round.
	Keys, Workers, OpsPerKey int
	// CancelOneIn: one operation in CancelOneIn runs with a context that
	// ends within a few milliseconds (0: never).
	CancelOneIn int
	// OpTimeout bounds one operation; default 3s.
	OpTimeout time.Duration
	// CheckTimeout bounds porcupine per round; default 2 minutes.
	CheckTimeout time.Duration
	// Quiesce waits until the server has finished every statement the
	// workers sent (a cut connection's statement may still be running).
	Quiesce func(ctx context.Context) error
	// FailDir, when set, receives a porcupine visualization of each round
	// that is not linearizable.
	FailDir string
	// Log, when set, receives a line per round.
	Log func(format string, args ...any)
	// Unfenced writes the ledger rows without the fence: a deliberate bug,
	// for the test that proves the check catches stale writes.
	Unfenced bool
}

// LeaseReport sums up RunLease.
type LeaseReport struct {
	Rounds  int
	Ops     int64 // operations recorded
	Elapsed time.Duration
	// Budgeted: the run stopped at Budget before it recorded Ops.
	Budgeted   bool
	Unknown    int64 // of which with an unknown outcome
	Fenced     int64 // fenced writes committed (ledger rows)
	Faults     map[faults.Kind]int64
	Violations int // rounds that are not linearizable, plus fenced claims the ledger contradicts
	Undecided  int // rounds porcupine could not decide within CheckTimeout
	Errors     []string
}

// token numbers are unique in a process; holders are "t<n>".
var tokSeq atomic.Int64

type grant struct {
	tok int64
	g   lease.Grant[string]
}

// RunLease records lease histories under faults, round after round, and
// checks each round with porcupine, until cfg.Ops operations are
// recorded, cfg.Budget has passed, or ctx ends.
func RunLease(ctx context.Context, cfg LeaseConfig) (LeaseReport, error) {
	if cfg.OpTimeout == 0 {
		cfg.OpTimeout = 3 * time.Second
	}
	if cfg.CheckTimeout == 0 {
		cfg.CheckTimeout = 2 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	l, err := lease.New[string](cfg.Dialect, engine.MustTable(LeaseTable, leaseCols), lease.Options{})
	if err != nil {
		return LeaseReport{}, err
	}
	rep := LeaseReport{Faults: map[faults.Kind]int64{}}
	start := time.Now()
	var cancels atomic.Int64
	for round := 0; rep.Ops < int64(cfg.Ops) && ctx.Err() == nil; round++ {
		if cfg.Budget > 0 && round > 0 && time.Since(start) >= cfg.Budget {
			rep.Budgeted = true
			break
		}
		r := &leaseRound{cfg: cfg, l: l, n: round, h: NewHistory(), cancels: &cancels}
		if err := r.run(ctx, &rep); err != nil {
			rep.Elapsed = time.Since(start)
			return rep, fmt.Errorf("round %d: %w", round, err)
		}
		rep.Rounds++
	}
	if cfg.Proxy != nil {
		for k, v := range cfg.Proxy.Counts() {
			rep.Faults[k] += v
		}
	}
	if n := cancels.Load(); n > 0 {
		rep.Faults[faults.Cancel] += n
	}
	rep.Elapsed = time.Since(start)
	return rep, ctx.Err()
}

type leaseRound struct {
	cfg     LeaseConfig
	l       *lease.Lease[string]
	n       int
	h       *History
	cancels *atomic.Int64
	seq     atomic.Int64
}

// sysClient is the client id of the test's own operations (expiries,
// final reads).
func (r *leaseRound) sysClient() int { return r.cfg.Keys * r.cfg.Workers }

func (r *leaseRound) key(i int) string { return fmt.Sprintf("r%dk%d", r.n, i) }

func (r *leaseRound) run(ctx context.Context, rep *LeaseReport) error {
	cfg := r.cfg
	for i := range cfg.Keys {
		if err := retry(ctx, func(c context.Context) error {
			return r.l.Ensure(c, cfg.Direct, r.key(i), lease.CreateOptions{State: "a"})
		}); err != nil {
			return err
		}
	}
	rctx, stop := context.WithCancel(ctx)
	var bg sync.WaitGroup
	var injErr error
	if cfg.Proxy != nil {
		bg.Go(func() {
			if injErr = cfg.Proxy.Inject(rctx, cfg.Injector); injErr != nil {
				stop() // a server that did not come back: the workers would wait for it forever
			}
		})
	}
	bg.Go(func() { r.expirer(rctx) })
	var wg sync.WaitGroup
	for k := range cfg.Keys {
		for w := range cfg.Workers {
			client := k*cfg.Workers + w
			wg.Go(func() { r.worker(rctx, client, r.key(k), cfg.OpsPerKey/cfg.Workers) })
		}
	}
	wg.Wait()
	stop()
	bg.Wait()
	if injErr != nil {
		return fmt.Errorf("injector: %w", injErr)
	}
	if ctx.Err() != nil {
		return nil
	}
	// Everything sent has returned; wait until the server has finished
	// what it may still be running for a cut connection.
	tq := time.Now()
	if cfg.Quiesce != nil {
		if err := retry(ctx, cfg.Quiesce); err != nil {
			return fmt.Errorf("quiesce (after %s): %w", time.Since(tq).Round(time.Millisecond), err)
		}
	}
	quiesced := time.Since(tq)
	for i := range cfg.Keys {
		r.read(ctx, r.sysClient(), r.key(i), cfg.Direct, true)
	}
	ops := r.h.Close()
	ops, mismatches, committed, err := r.resolve(ctx, ops)
	if err != nil {
		return err
	}
	var unknown int64
	for _, op := range ops {
		if op.Output.(Output).Res == ResUnknown {
			unknown++
		}
	}
	rep.Ops += int64(r.h.Len())
	rep.Unknown += unknown
	rep.Fenced += committed
	rep.Violations += len(mismatches)
	rep.Errors = append(rep.Errors, mismatches...)
	t0 := time.Now()
	res := porcupine.CheckOperationsTimeout(Model.ToModel(), ops, cfg.CheckTimeout)
	switch res {
	case porcupine.Illegal:
		rep.Violations++
		msg := fmt.Sprintf("round %d: history not linearizable", r.n)
		if cfg.FailDir != "" {
			_, info := porcupine.CheckOperationsVerbose(Model.ToModel(), ops, cfg.CheckTimeout)
			path := filepath.Join(cfg.FailDir, fmt.Sprintf("chaos-%s-round%d.html", cfg.Dialect, r.n))
			if err := porcupine.VisualizePath(Model.ToModel(), info, path); err == nil {
				msg += " (see " + path + ")"
			}
		}
		rep.Errors = append(rep.Errors, msg)
	case porcupine.Unknown:
		rep.Undecided++
		rep.Errors = append(rep.Errors, fmt.Sprintf("round %d: porcupine undecided after %s", r.n, cfg.CheckTimeout))
	}
	cfg.Log("%s round %d: %d ops (%d unknown, %d fenced writes committed), quiesced in %s, %s, checked in %s",
		cfg.Dialect, r.n, r.h.Len(), unknown, committed, quiesced.Round(time.Millisecond), res, time.Since(t0).Round(time.Millisecond))
	return nil
}

// retry runs f until it succeeds or ctx ends, for setup and final reads
// that must get through a restarting server.
func retry(ctx context.Context, f func(context.Context) error) error {
	var err error
	for attempt := 0; attempt < 200; attempt++ {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = f(c)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
	return err
}

// sleepCtx waits d or until ctx ends, as the library's own waits do.
func sleepCtx(ctx context.Context, d time.Duration) bool { return wait.Sleep(ctx, d) }

// resolve settles the fenced writes with the ledger: a row means the write
// committed (ResOK with the generation it carries), no row after an
// error means it took no effect (dropped from the history). A success the
// ledger lacks, or a refusal it has, is a violation.
func (r *leaseRound) resolve(ctx context.Context, ops []porcupine.Operation) ([]porcupine.Operation, []string, int64, error) {
	rows := map[string]int64{}
	err := retry(ctx, func(c context.Context) error {
		clear(rows)
		q := r.cfg.Dialect.Rebind("SELECT id, gen FROM " + LedgerTable + " WHERE id LIKE ?")
		rs, err := r.cfg.Direct.QueryContext(c, q, fmt.Sprintf("r%d-%%", r.n))
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var id string
			var gen int64
			if err := rs.Scan(&id, &gen); err != nil {
				return err
			}
			rows[id] = gen
		}
		return rs.Err()
	})
	if err != nil {
		return nil, nil, 0, err
	}
	var bad []string
	out := ops[:0]
	for _, op := range ops {
		in, o := op.Input.(Input), op.Output.(Output)
		if in.Kind == OpFenced {
			id := fencedID(op.Metadata)
			gen, committed := rows[id]
			switch {
			case committed && o.Res == ResRefused:
				bad = append(bad, fmt.Sprintf("fenced write %s reported lost but committed", id))
			case !committed && o.Res == ResOK:
				bad = append(bad, fmt.Sprintf("fenced write %s reported committed but is not in the ledger", id))
			case committed && gen != in.Gen:
				bad = append(bad, fmt.Sprintf("fenced write %s: ledger generation %d, written %d", id, gen, in.Gen))
			}
			switch {
			case committed:
				o.Res, o.Gen = ResOK, gen
			case o.Res == ResUnknown:
				continue // it took no effect
			}
			op.Output = o
		}
		if in.Kind == OpRead && o.Res == ResUnknown {
			continue // a failed read has no effect
		}
		out = append(out, op)
	}
	return out, bad, int64(len(rows)), nil
}

func fencedID(meta any) string { s, _ := meta.(string); return s }

// expirer expires a random key of the round now and then, on the direct
// pool, and records it.
func (r *leaseRound) expirer(ctx context.Context) {
	var past string
	switch r.cfg.Dialect {
	case lease.MySQL:
		past = "'2000-01-01 00:00:00'"
	case lease.Postgres:
		past = "TIMESTAMPTZ '2000-01-01 00:00:00+00'"
	default:
		past = "946684800000000"
	}
	q := r.cfg.Dialect.Rebind("UPDATE " + LeaseTable + " SET expires_at = " + past + " WHERE k = ? AND token IS NOT NULL")
	every := 2 * time.Millisecond * time.Duration(max(1, 40/r.cfg.Keys))
	for sleepCtx(ctx, every/2+rand.N(every)) {
		key := r.key(rand.IntN(r.cfg.Keys))
		c, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
		call := r.h.Now()
		_, err := r.cfg.Direct.ExecContext(c, q, key)
		ret := r.h.Now()
		cancel()
		res := ResOK
		if err != nil {
			res = ResUnknown
		}
		r.h.Add(r.sysClient(), Input{Kind: OpExpire, Key: key}, Output{Res: res, Gen: -1}, call, ret)
		if err != nil {
			// One unknown expiry per outage: a server that is down would
			// otherwise fail one every few milliseconds, and every unknown
			// operation widens porcupine's search.
			waitUp(ctx, r.cfg.Direct)
		}
	}
}

func (r *leaseRound) read(ctx context.Context, client int, key string, db lease.DB, must bool) {
	var st lease.Snapshot
	var err error
	call := r.h.Now()
	if must {
		err = retry(ctx, func(c context.Context) error {
			call = r.h.Now()
			st, err = r.l.Inspect(c, db, key)
			return err
		})
	} else {
		c, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
		st, err = r.l.Inspect(c, db, key)
		cancel()
	}
	ret := r.h.Now()
	out := Output{Res: ResOK, Gen: st.Generation, Held: st.Held}
	if err != nil {
		out = Output{Res: ResUnknown}
	} else {
		if st.Holder != "" {
			n, perr := strconv.ParseInt(strings.TrimPrefix(st.Holder, "t"), 10, 64)
			if perr != nil {
				n = -1
			}
			out.Tok = n
		}
		if st.State != "" {
			out.State = st.State[0]
		}
	}
	r.h.Add(client, Input{Kind: OpRead, Key: key}, out, call, ret)
}

func classify(err error, refused ...error) Res {
	if err == nil {
		return ResOK
	}
	for _, e := range refused {
		if errors.Is(err, e) {
			return ResRefused
		}
	}
	return ResUnknown
}

// worker runs n random operations on key with its own grants: the current
// one and a few stale ones it held before (to check fencing). It runs them
// on a connection of its own, so that after an operation of unknown
// outcome it can end that connection's server session and wait until it
// is gone: from then on nothing of the operation can still land, and its
// return time is known (see settle).
func (r *leaseRound) worker(ctx context.Context, client int, key string, n int) {
	cfg := r.cfg
	var cur *grant
	var stale []grant
	retire := func() {
		if cur != nil {
			stale = append(stale, *cur)
			if len(stale) > 4 {
				stale = stale[1:]
			}
			cur = nil
		}
	}
	var sc *serverConn
	defer func() { sc.close() }()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		if sc == nil {
			if sc = r.open(ctx); sc == nil {
				return
			}
		}
		c, cancel := context.WithTimeout(context.WithValue(ctx, connKey{}, sc.db()), cfg.OpTimeout)
		if cfg.CancelOneIn > 0 && rand.IntN(cfg.CancelOneIn) == 0 {
			cancel()
			c, cancel = context.WithTimeout(context.WithValue(ctx, connKey{}, sc.db()), time.Duration(rand.IntN(3000))*time.Microsecond)
		}
		res := r.step(c, client, key, &cur, &stale, retire)
		if res == ResUnknown && c.Err() != nil && ctx.Err() == nil {
			r.cancels.Add(1)
		}
		cancel()
		if res == ResUnknown && ctx.Err() == nil {
			if r.settle(ctx, sc) {
				r.h.Settle(client)
			}
			sc.close()
			sc = nil
			// Wait for the database before going on, so that one outage
			// gives each worker at most one operation of unknown outcome.
			r.waitUp(ctx)
		}
	}
}

type connKey struct{}

// db is the worker's connection carried by ctx, or the pool.
func (r *leaseRound) db(ctx context.Context) lease.TxBeginner {
	if c, ok := ctx.Value(connKey{}).(lease.TxBeginner); ok {
		return c
	}
	return r.cfg.DB
}

// serverConn is a worker's connection and the identity of its server
// session: the MySQL connection id, or the PostgreSQL backend pid and
// start; and the server's start, since ids start again after a restart.
type serverConn struct {
	c            *sql.Conn
	id           int64
	since, epoch string
}

func (sc *serverConn) db() lease.TxBeginner { return sc.c }

// close gives the connection up for good (never back to the pool: its
// session may be killed).
func (sc *serverConn) close() {
	if sc == nil {
		return
	}
	_ = sc.c.Raw(func(any) error { return driver.ErrBadConn })
	_ = sc.c.Close()
}

func (r *leaseRound) open(ctx context.Context) *serverConn {
	for ctx.Err() == nil {
		c, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
		sc, err := r.tryOpen(c)
		cancel()
		if err == nil {
			return sc
		}
		r.waitUp(ctx)
	}
	return nil
}

func (r *leaseRound) tryOpen(ctx context.Context) (*serverConn, error) {
	c, err := r.cfg.DB.Conn(ctx)
	if err != nil {
		return nil, err
	}
	sc := &serverConn{c: c}
	switch r.cfg.Dialect {
	case lease.MySQL:
		err = c.QueryRowContext(ctx, "SELECT CONNECTION_ID(), CAST(UNIX_TIMESTAMP() - VARIABLE_VALUE AS CHAR) "+
			"FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME'").Scan(&sc.id, &sc.epoch)
	case lease.Postgres:
		err = c.QueryRowContext(ctx, "SELECT pg_backend_pid(), CAST(backend_start AS TEXT), CAST(pg_postmaster_start_time() AS TEXT) "+
			"FROM pg_stat_activity WHERE pid = pg_backend_pid()").Scan(&sc.id, &sc.since, &sc.epoch)
	}
	if err != nil {
		sc.close()
		return nil, err
	}
	return sc, nil
}

// settle ends the server session of sc (after an operation of unknown
// outcome on it) and waits until the server shows it no more. It reports
// false when it could not tell (SQLite, which has no server session: the
// operation then stays unknown until the end of the round).
func (r *leaseRound) settle(ctx context.Context, sc *serverConn) bool {
	var kill, gone, epoch string
	var args []any
	switch r.cfg.Dialect {
	case lease.MySQL:
		kill = fmt.Sprintf("KILL %d", sc.id)
		gone = "SELECT COUNT(*) FROM information_schema.processlist WHERE id = ?"
		epoch = "SELECT CAST(UNIX_TIMESTAMP() - VARIABLE_VALUE AS CHAR) FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME'"
		args = []any{sc.id}
	case lease.Postgres:
		kill = fmt.Sprintf("SELECT pg_terminate_backend(%d)", sc.id)
		gone = "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = $1 AND CAST(backend_start AS TEXT) = $2"
		epoch = "SELECT CAST(pg_postmaster_start_time() AS TEXT)"
		args = []any{sc.id, sc.since}
	default:
		return false
	}
	err := retry(ctx, func(c context.Context) error {
		var e string
		if err := r.cfg.Direct.QueryRowContext(c, epoch).Scan(&e); err != nil {
			return err
		}
		if e != sc.epoch {
			// MySQL's epoch is computed in whole seconds and may be off by
			// one; a restart moves it by more.
			if r.cfg.Dialect != lease.MySQL || absDiff(e, sc.epoch) > 1 {
				return nil // the server restarted: the session is gone
			}
		}
		_, _ = r.cfg.Direct.ExecContext(c, kill) // it may be gone already
		for {
			var n int
			if err := r.cfg.Direct.QueryRowContext(c, gone, args...).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return nil
			}
			if !sleepCtx(c, 2*time.Millisecond) {
				return c.Err()
			}
		}
	})
	return err == nil
}

func absDiff(a, b string) int64 {
	x, _ := strconv.ParseInt(a, 10, 64)
	y, _ := strconv.ParseInt(b, 10, 64)
	if x > y {
		return x - y
	}
	return y - x
}

func (r *leaseRound) waitUp(ctx context.Context) { waitUp(ctx, r.cfg.DB) }

// waitUp returns once db answers a ping, or ctx ends.
func waitUp(ctx context.Context, db *sqlx.DB) {
	for d := 5 * time.Millisecond; ; d = min(2*d, 200*time.Millisecond) {
		c, cancel := context.WithTimeout(ctx, time.Second)
		err := db.PingContext(c)
		cancel()
		if err == nil || !sleepCtx(ctx, d) {
			return
		}
	}
}

// step runs one random operation and records it.
func (r *leaseRound) step(ctx context.Context, client int, key string, cur **grant, stale *[]grant, retire func()) Res {
	db := r.db(ctx)
	p := rand.IntN(100)
	if *cur == nil {
		switch {
		case p < 65:
			return r.acquire(ctx, client, key, cur, retire)
		case p < 85 && len(*stale) > 0:
			g := (*stale)[rand.IntN(len(*stale))]
			return r.tokenOp(ctx, client, key, &g, rand.IntN(3), nil)
		default:
			r.read(ctx, client, key, db, false)
			return ResOK
		}
	}
	switch {
	case p < 20:
		return r.tokenOp(ctx, client, key, *cur, 0, retire) // renew
	case p < 45:
		return r.fenced(ctx, client, key, *cur, retire)
	case p < 55:
		return r.reenter(ctx, client, key, *cur, retire)
	case p < 65:
		return r.transition(ctx, client, key, *cur, retire)
	case p < 75:
		return r.tokenOp(ctx, client, key, *cur, 1, retire) // release
	case p < 82:
		r.read(ctx, client, key, db, false)
		return ResOK
	case p < 87:
		return r.acquire(ctx, client, key, cur, retire)
	default:
		if len(*stale) == 0 {
			r.read(ctx, client, key, db, false)
			return ResOK
		}
		g := (*stale)[rand.IntN(len(*stale))]
		return r.tokenOp(ctx, client, key, &g, rand.IntN(3), nil)
	}
}

func (r *leaseRound) acquire(ctx context.Context, client int, key string, cur **grant, retire func()) Res {
	tok := tokSeq.Add(1)
	in := Input{Kind: OpAcquire, Key: key, Tok: tok}
	o := lease.AcquireOptions{}
	if rand.IntN(5) == 0 {
		in.In = "ab"[rand.IntN(2)]
		o.InStates = []string{string(in.In)}
	}
	call := r.h.Now()
	g, err := r.l.AcquireWith(ctx, r.db(ctx), key, "t"+strconv.FormatInt(tok, 10), longTTL, o)
	ret := r.h.Now()
	res := classify(err, lease.ErrHeld, lease.ErrState)
	r.h.Add(client, in, Output{Res: res, Gen: g.Generation}, call, ret)
	if res == ResOK {
		retire()
		*cur = &grant{tok: tok, g: g}
	}
	return res
}

func (r *leaseRound) reenter(ctx context.Context, client int, key string, g *grant, retire func()) Res {
	in := Input{Kind: OpReenter, Key: key, Tok: g.tok}
	call := r.h.Now()
	ng, err := r.l.AcquireWith(ctx, r.db(ctx), key, g.g.Holder, longTTL, lease.AcquireOptions{Token: g.g.Token})
	ret := r.h.Now()
	res := classify(err, lease.ErrHeld, lease.ErrState)
	r.h.Add(client, in, Output{Res: res, Gen: ng.Generation}, call, ret)
	switch res {
	case ResOK:
		g.g = ng // the generation may be new if the row was free
	case ResRefused:
		retire()
	}
	return res
}

// tokenOp runs a token-checked operation with g: 0 renew, 1 release, 2 a
// fenced write. retire is nil for a stale grant.
func (r *leaseRound) tokenOp(ctx context.Context, client int, key string, g *grant, which int, retire func()) Res {
	if which == 2 {
		return r.fenced(ctx, client, key, g, retire)
	}
	in := Input{Kind: OpRenew, Key: key, Tok: g.tok, Gen: g.g.Generation}
	call := r.h.Now()
	var err error
	out := Output{Gen: -1}
	if which == 0 {
		var ng lease.Grant[string]
		ng, err = r.l.Renew(ctx, r.db(ctx), g.g, longTTL)
		out.Gen = ng.Generation
	} else {
		in.Kind = OpRelease
		err = r.l.Release(ctx, r.db(ctx), g.g)
	}
	ret := r.h.Now()
	out.Res = classify(err, lease.ErrLost)
	if out.Res != ResOK {
		out.Gen = -1
	}
	r.h.Add(client, in, out, call, ret)
	if retire != nil && (out.Res == ResRefused || in.Kind == OpRelease) {
		retire()
	}
	return out.Res
}

func (r *leaseRound) transition(ctx context.Context, client int, key string, g *grant, retire func()) Res {
	from := "ab"[rand.IntN(2)]
	to := "ab"[1-int(from-'a')]
	in := Input{Kind: OpTransition, Key: key, Tok: g.tok, Gen: g.g.Generation, In: from, To: to, Keep: rand.IntN(2) == 0}
	o := lease.ChangeOptions{From: []string{string(from)}, To: string(to), Keep: in.Keep}
	if in.Keep {
		o.TTL = longTTL
	}
	call := r.h.Now()
	ng, err := r.l.Transition(ctx, r.db(ctx), g.g, o)
	ret := r.h.Now()
	res := classify(err, lease.ErrLost)
	out := Output{Res: res, Gen: -1}
	if res == ResOK {
		out.Gen = ng.Generation
	}
	r.h.Add(client, in, out, call, ret)
	if res == ResRefused || (res == ResOK && !in.Keep) {
		retire()
	}
	return res
}

// fenced writes a ledger row carrying g's generation in a RunFenced
// transaction fenced by g.
func (r *leaseRound) fenced(ctx context.Context, client int, key string, g *grant, retire func()) Res {
	id := fmt.Sprintf("r%d-%d", r.n, r.seq.Add(1))
	in := Input{Kind: OpFenced, Key: key, Tok: g.tok, Gen: g.g.Generation}
	ins := r.cfg.Dialect.Rebind("INSERT INTO " + LedgerTable + " (id, k, gen, tok) VALUES (?, ?, ?, ?)")
	call := r.h.Now()
	fences := []lease.Fence{r.l.Fence("lease", g.g)}
	if r.cfg.Unfenced {
		fences = nil
	}
	err := engine.RunFenced(ctx, r.db(ctx), engine.FencedTx{Fences: fences}, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, ins, id, key, g.g.Generation, g.tok)
		return err
	})
	ret := r.h.Now()
	res := classify(err, lease.ErrLost)
	r.h.AddMeta(client, in, Output{Res: res, Gen: -1}, call, ret, id)
	if res == ResRefused && retire != nil {
		retire()
	}
	return res
}

// FailDir is where visualizations of failed rounds go: $ROWLEASE_CHAOS_DIR
// or the temp dir.
func FailDir() string {
	if d := os.Getenv("ROWLEASE_CHAOS_DIR"); d != "" {
		return d
	}
	return os.TempDir()
}
