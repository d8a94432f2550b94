package heartbeat

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
)

// ErrWriteLocked is the transient error a batched renewal reports when it
// was put off because, on SQLite, another flow's fenced transaction holds
// the database's only write lock (see Batcher). It is retried like any
// transient error. It stays inside the Batcher's rounds (OnEvent, the
// log): it is never a run's error, so it is not lease's transient kind.
var ErrWriteLocked = errors.New("heartbeat: renewal put off: a flow's transaction holds the SQLite write lock")

// BatchConfig configures a Batcher.
type BatchConfig struct {
	// Interval is the time between two rounds of renewals. Required, above
	// zero; every Supervisor using the Batcher must have an Interval at
	// least this long (New checks).
	Interval time.Duration
	// Clock is the local clock; it must be the clock of the Supervisors
	// and leases (nil: time.Now).
	Clock lease.Clock
	// Logger receives failed rounds (Warn). Nil means slog.Default().
	Logger *slog.Logger
	// AfterRound, when set, is called on the Batcher's goroutine after each
	// round of renewals (not after the off-round renewal of a single
	// lease), with a context that ends after one Interval: for work that
	// belongs with the renewals and should cost one statement per round, not
	// one per lease (package request reads there which of its runs were
	// asked to stop). It must return promptly. db is where to send that
	// work: the Batcher's kept connection of Pool (see Pool), so that it
	// does not wait for one behind the work either; Pool itself while no
	// connection is kept; nil without Pool. db is valid only until
	// AfterRound returns.
	AfterRound func(ctx context.Context, db lease.DB)
	// Pool, when set, is the pool whose leases the Batcher renews on one
	// connection of its own: taken from Pool by Reserve (or by the first
	// round that renews a lease on Pool) and kept while it has leases to
	// renew and for KeepIdle after the last (not after Close), so that a
	// renewal never waits for a free connection behind the work that the
	// leases protect — the fenced transactions of tools that each hold one
	// of Pool's connections. A kept connection that breaks is given back
	// and another taken at the next round. Pool then needs one connection
	// for the Batcher besides those of the work (README, "Sizing the
	// pool"); a Pool that opens one connection at most
	// (sql.DB.SetMaxOpenConns(1)) cannot spare one, and the Batcher takes
	// a connection for each statement instead, as it does for leases on
	// other pools. Leases are on Pool when the DB given to ForLease is Pool,
	// or a engine.FlowDB made on it.
	Pool ConnPool
	// KeepIdle is how long the kept connection of Pool stays the
	// Batcher's after its last lease ends: long enough for a session's
	// next message, sent as soon as the last was answered, to find it
	// (taken and given back for each run, it would be the connection the
	// run had just used — database/sql hands out the last one given back
	// — and move the run's next statements to another); short enough
	// that a program that closes its pool without closing its Runner gets
	// it back at once, as it were. Zero: 100 ms, or the Interval if
	// shorter. Negative is invalid.
	KeepIdle time.Duration
}

// Batcher renews the leases of many Supervisors together: every Interval,
// one statement per table (per engine.MaxBatch leases) renews every lease
// it keeps — engine.RenewMany — instead of one statement per lease.
// A thousand runs in flight, each with a session and a request lease, cost
// two statements per Interval instead of two thousand.
//
// Give it to Supervisors through Config.Batcher; they hand it the
// *LeaseRenewer leases they supervise (other Renewers they renew
// themselves) and keep everything else: each Supervisor still cancels its
// own work context with a *LostError as soon as one of its leases is
// lost, still watches every trust deadline on its own, and Stop still
// joins it. A Batcher is safe for concurrent use. It runs one goroutine
// while it has leases to renew, and none when it has none: there is
// nothing to start or stop (with BatchConfig.Pool, Close gives back the
// connection it keeps while it has leases, and for a moment after).
//
// # Guarantees
//
//   - Each lease is renewed at least once per Interval (sooner when half
//     its remaining trust is less, as a Supervisor does), and its trust
//     deadline is computed from the send time of the statement that renewed
//     it. A lease that a round finds lost is reported to its Supervisor
//     within that round, on its own: the other leases of the statement are
//     renewed.
//   - A failed statement (a dropped connection, a deadlock victim) is a
//     transient error for every lease it carried; they are retried after a
//     quarter of their trust left, as a Supervisor retries.
//   - A statement runs with a context that ends at the earliest trust
//     deadline among its leases, as a Supervisor's renewal does.
//
// # What it does not do
//
//   - A batch statement waits for every row lock on the rows it renews:
//     a transaction that writes a lease row and stays open holds up the
//     renewal of every lease of that table in the process, until it ends
//     or the earliest trust deadline passes (then every lease of the
//     statement is lost, ReasonDeadline). The fences lock lease rows only
//     from the confirmations to the commit; do not write a lease row in a
//     long transaction of your own (renew it with Confirm at the end), or
//     give such a flow a Supervisor without a Batcher.
//   - With mattn/go-sqlite3, a statement waiting in SQLite's busy handler
//     does not see its context end (modernc.org/sqlite's does): a batch
//     sent just before a flow's fenced transaction took the write lock
//     then waits until that transaction ends or the busy timeout passes,
//     and the Batcher with it, whatever the statement's deadline.
//
// # Connections
//
// A round's statement runs on a connection the Batcher takes from the
// leases' pool explicitly (their DB must be a ConnPool for that, such as
// a *sql.DB), and with BatchConfig.Pool on one it keeps. If no connection
// is free before the statement's deadline — the earliest trust deadline
// of its leases — every lease of the statement is lost, and the
// *LostError (ReasonPoolExhausted) matches lease.ErrPoolExhausted: the
// pool was too small for the work and its heartbeat, and nobody took
// anything over. With BatchConfig.Pool that happens only when the kept
// connection cannot be taken (again) in time.
//
// # SQLite
//
// On SQLite a fenced transaction holds the database's only write lock, and
// a flow renews its leases inside its own open transaction (engine.FlowDB).
// A batch on the pool would wait behind it, so a round renews the leases
// of a flow whose transaction is open through its FlowDB, one statement
// each, and puts off the batch of the other flows on that database
// (ErrWriteLocked, retried): while the transaction holds the write lock,
// nobody can take those leases over either. A renewal routed into a
// transaction counts when it commits (see LeaseRenewer). A flow's renewal
// meant for its transaction that finds it ended goes to the pool and
// waits there at most one Interval for the write lock.
type Batcher struct {
	cfg   BatchConfig
	clock lease.Clock
	log   *slog.Logger

	mu       sync.Mutex
	members  []*member // in the order added
	running  bool
	nextTick time.Time
	// sleeping is when the goroutine, waiting, wakes next; zero while it
	// works. An add that is due no sooner, and a remove that leaves
	// members, need not wake it: it looks at every member again when it
	// wakes.
	sleeping time.Time
	wake     chan struct{} // capacity 1
	done     chan struct{} // closed when the current goroutine returns
	lastHook time.Time     // when AfterRound last ran (the goroutine's own)
	kept     keptConn      // the connection of cfg.Pool that rounds renew on
	// reserved: Reserve took the kept connection for leases not added
	// yet; a goroutine that returns keeps it for them.
	reserved bool
}

// NewBatcher validates cfg and returns a Batcher. Bad input gives an
// error matching lease.ErrInvalid.
func NewBatcher(cfg BatchConfig) (*Batcher, error) {
	if cfg.Interval <= 0 {
		return nil, &engine.ValidationError{Package: "heartbeat", Field: "batch interval", Reason: "must be positive"}
	}
	if cfg.KeepIdle < 0 {
		return nil, &engine.ValidationError{Package: "heartbeat", Field: "keep idle", Reason: "negative"}
	}
	if cfg.KeepIdle == 0 {
		cfg.KeepIdle = min(defaultKeepIdle, cfg.Interval)
	}
	clock := cfg.Clock
	if clock == nil {
		clock = systemClock{}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if isNilDB(cfg.Pool) {
		cfg.Pool = nil
	}
	return &Batcher{cfg: cfg, clock: clock, log: log, wake: make(chan struct{}, 1), kept: keptConn{sem: make(chan struct{}, 1)}}, nil
}

// Interval returns the batch interval.
func (b *Batcher) Interval() time.Duration { return b.cfg.Interval }

// Len returns the number of leases the Batcher keeps now.
func (b *Batcher) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.members)
}

// Wait blocks until the Batcher's goroutine has returned, which it does
// once it keeps no lease (every Supervisor using it stopped), or until ctx
// ends. It is for tests and orderly shutdowns.
func (b *Batcher) Wait(ctx context.Context) error {
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// batchable is a Renewer that a Batcher can renew with others of its
// group in one statement: *LeaseRenewer.
type batchable interface {
	Renewer
	// group is the key of the leases renewed together: same lease (table),
	// same pool, same TTL. Comparable.
	group() any
	// routed reports that the renewal must go alone through the flow's
	// FlowDB, which has a transaction open (SQLite), and on which pool.
	routed() (bool, any)
	// dialect is the lease's dialect.
	dialect() lease.Dialect
	// pool is the pool a batch renewal of its group goes to.
	pool() lease.DB
	// renewGroup renews rs (all of r's group) on db, pool() or one of its
	// connections, and returns, for each, the new deadline or the error.
	renewGroup(ctx context.Context, db lease.DB, rs []batchable) ([]time.Time, []error)
}

// member is one lease of one Supervisor, kept by a Batcher.
type member struct {
	sup  *Supervisor
	e    *entry
	r    batchable
	due  time.Time // an off-round renewal: a retry, or a lease short of trust
	kept bool      // in Batcher.members; guarded by Batcher.mu
}

func (b *Batcher) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// add keeps m from now on; its first renewal is the next round, or
// sooner when half its trust left is less.
func (b *Batcher) add(m *member) {
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.running {
		b.running = true
		b.done = make(chan struct{})
		if !now.Before(b.nextTick) {
			b.nextTick = now.Add(b.cfg.Interval)
		}
		go b.run(b.done)
	}
	m.due = b.nextTick
	if half := now.Add(m.r.Deadline().Sub(now) / 2); half.Before(m.due) {
		m.due = half
	}
	b.members = append(b.members, m)
	m.kept = true
	b.reserved = false
	if !b.sleeping.IsZero() && m.due.Before(b.sleeping) {
		b.signal() // due before the goroutine wakes
	}
}

// remove stops renewing m; a round in flight for it is let finish and
// its result ignored. The goroutine is woken only when no lease is left,
// so that it returns.
func (b *Batcher) remove(m *member) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.drop(m)
	if len(b.members) == 0 {
		b.signal()
	}
}

// drop takes m out of the members, keeping the others in order. b.mu
// must be held.
func (b *Batcher) drop(m *member) {
	if !m.kept {
		return
	}
	m.kept = false
	if i := slices.Index(b.members, m); i >= 0 {
		b.members = slices.Delete(b.members, i, i+1)
	}
}

// hurry renews m at once (its trust deadline moved back).
func (b *Batcher) hurry(m *member) {
	now := b.clock.Now()
	b.mu.Lock()
	if m.kept {
		m.due = now
	}
	b.mu.Unlock()
	b.signal()
}

// run is the Batcher's goroutine: it returns when no lease is kept.
func (b *Batcher) run(done chan struct{}) {
	defer close(done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := b.clock.Now()
		b.mu.Lock()
		b.sleeping = time.Time{}
		if len(b.members) == 0 {
			b.running = false
			b.mu.Unlock()
			b.idle()
			return
		}
		if !now.Before(b.nextTick) { // a round: everyone
			for _, m := range b.members {
				m.due = now
			}
			for !now.Before(b.nextTick) {
				b.nextTick = b.nextTick.Add(b.cfg.Interval)
			}
		}
		var due []*member
		wake := b.nextTick
		for _, m := range b.members {
			if !now.Before(m.due) {
				due = append(due, m)
			} else if m.due.Before(wake) {
				wake = m.due
			}
		}
		if len(due) == 0 {
			b.sleeping = wake
		}
		b.mu.Unlock()
		if len(due) > 0 {
			b.renew(due)
			b.afterRound()
			continue
		}
		timer.Reset(time.Until(wallTime(b.clock, wake)))
		select {
		case <-timer.C:
		case <-b.wake:
			timer.Stop()
		}
	}
}

// afterRound runs cfg.AfterRound, at most once per Interval.
func (b *Batcher) afterRound() {
	if b.cfg.AfterRound == nil {
		return
	}
	now := b.clock.Now()
	if !b.lastHook.IsZero() && now.Sub(b.lastHook) < b.cfg.Interval/2 { // off-round renewals: not again
		return
	}
	b.lastHook = now
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.Interval)
	defer cancel()
	db, done := b.hookDB(ctx)
	defer done()
	b.cfg.AfterRound(ctx, db)
}

// renew renews due: first, alone, the leases of flows with a transaction
// open (SQLite); then every group in one statement per engine.MaxBatch,
// except groups on a database such a transaction write-locks.
func (b *Batcher) renew(due []*member) {
	type grp struct {
		key     any
		members []*member
	}
	var groups []*grp
	index := map[any]*grp{}
	locked := map[any]bool{}
	for _, m := range due {
		if alone, pool := m.r.routed(); alone {
			locked[pool] = true
			b.renewOne(m)
			continue
		}
		k := m.r.group()
		g := index[k]
		if g == nil {
			g = &grp{key: k}
			index[k] = g
			groups = append(groups, g)
		}
		g.members = append(g.members, m)
	}
	for _, g := range groups {
		if _, pool := g.members[0].r.routed(); pool != nil && locked[pool] {
			now := b.clock.Now()
			for _, m := range g.members {
				b.settle(m, now, time.Time{}, ErrWriteLocked)
			}
			continue
		}
		b.renewGroup(g.members)
	}
}

// limit is the deadline of one statement: the earliest trust deadline of
// its leases (as a Supervisor's renewal has); on SQLite also at most one
// Interval away, so that a batch that waits for a transaction begun just
// after the round looked (see Batcher) cannot keep that transaction's own
// flow from being renewed inside it for long.
func (b *Batcher) limit(ms []*member, sqlite bool) time.Time {
	var dl time.Time
	if sqlite {
		dl = b.clock.Now().Add(b.cfg.Interval)
	}
	for _, m := range ms {
		if d := m.r.Deadline(); dl.IsZero() || d.Before(dl) {
			dl = d
		}
	}
	return wallTime(b.clock, dl)
}

// renewOne renews m alone, through its flow's FlowDB. Inside the flow's
// transaction the statement runs at once; if that transaction ended
// meanwhile it goes to the pool, where another transaction may hold the
// write lock: on SQLite it then waits at most one Interval, as a batch
// does, and is retried.
func (b *Batcher) renewOne(m *member) {
	ctx, cancel := context.WithDeadline(context.Background(), b.limit([]*member{m}, m.r.dialect() == lease.SQLite))
	nd, err := m.r.Renew(ctx)
	cancel()
	b.settle(m, b.clock.Now(), nd, err)
}

func (b *Batcher) renewGroup(ms []*member) {
	rs := make([]batchable, len(ms))
	for i, m := range ms {
		rs[i] = m.r
	}
	ctx, cancel := context.WithDeadline(context.Background(), b.limit(ms, rs[0].dialect() == lease.SQLite))
	var dls []time.Time
	var errs []error
	if db, done, err := b.on(ctx, rs[0].pool()); err != nil {
		dls, errs = make([]time.Time, len(rs)), make([]error, len(rs))
		for i, r := range rs {
			dls[i], errs[i] = r.Deadline(), err
		}
	} else {
		dls, errs = rs[0].renewGroup(ctx, db, rs)
		done(firstErr(errs))
	}
	cancel()
	now := b.clock.Now()
	failed := 0
	for i, m := range ms {
		if errs[i] != nil && !errors.Is(errs[i], lease.ErrLost) && !errors.Is(errs[i], lease.ErrInvalid) {
			failed++
		}
		b.settle(m, now, dls[i], errs[i])
	}
	if failed > 0 {
		b.log.Warn("heartbeat: batched renewal failed, retrying", "leases", failed, "err", firstErr(errs))
	}
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// settle hands a renewal's result to the member's Supervisor and plans
// the member's next off-round renewal: after a success, none unless half
// its trust ends before the next round; after a transient failure, a
// retry; after a loss, the member is dropped.
func (b *Batcher) settle(m *member, now, nd time.Time, err error) {
	b.mu.Lock()
	if !m.kept {
		b.mu.Unlock()
		return
	}
	switch {
	case err == nil:
		m.due = b.nextTick
		if half := now.Add(nd.Sub(now) / 2); half.Before(m.due) {
			m.due = half
		}
	case errors.Is(err, lease.ErrLost), errors.Is(err, lease.ErrInvalid):
		b.drop(m)
	default:
		m.due = now.Add(m.sup.retryDelay(m.r.Deadline().Sub(now)))
	}
	b.mu.Unlock()
	m.sup.deliver(m.e, result{at: now, deadline: nd, err: err})
}

// result is a batched renewal's outcome, handed to the Supervisor.
type result struct {
	at       time.Time // when the statement returned (Supervisor clock)
	deadline time.Time // the new trust deadline, on success
	err      error
}

// group is the key of the leases renewed together.
type groupKey struct {
	lease any
	pool  any
	ttl   time.Duration
}

// poolOf is the pool a renewal on db runs on, when it is comparable (it
// keys a group).
func poolOf(db lease.DB) any {
	if f, ok := db.(*engine.FlowDB); ok && f != nil {
		db = f.Pool()
	}
	if db == nil || !reflect.TypeOf(db).Comparable() {
		return nil
	}
	return db
}

// isNilDB reports a nil DB, or a typed nil pointer in one.
func isNilDB(db lease.DB) bool {
	if db == nil {
		return true
	}
	v := reflect.ValueOf(db)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

func (r *LeaseRenewer[K]) group() any {
	p := poolOf(r.db)
	if p == nil {
		return r // not comparable: a group of its own
	}
	return groupKey{lease: r.l, pool: p, ttl: r.Grant().TTL}
}

func (r *LeaseRenewer[K]) dialect() lease.Dialect {
	if r.l == nil {
		return 0
	}
	return engine.DialectOf(r.l)
}

func (r *LeaseRenewer[K]) routed() (bool, any) {
	f, ok := r.db.(*engine.FlowDB)
	if !ok || f == nil {
		return false, poolOf(r.db)
	}
	return f.InTx(), poolOf(f)
}

func (r *LeaseRenewer[K]) pool() lease.DB {
	if f, ok := r.db.(*engine.FlowDB); ok && f != nil {
		return f.Pool()
	}
	return r.db
}

// renewGroup renews rs, all *LeaseRenewer[K] of r's group, with
// engine.RenewMany on db: their pool, or one of its connections.
func (r *LeaseRenewer[K]) renewGroup(ctx context.Context, db lease.DB, rs []batchable) ([]time.Time, []error) {
	dls := make([]time.Time, len(rs))
	errs := make([]error, len(rs))
	gs := make([]lease.Grant[K], 0, len(rs))
	var send []int
	for i, x := range rs {
		lr := x.(*LeaseRenewer[K])
		g := lr.Grant()
		dls[i] = g.Deadline
		if err := lr.check(); err != nil {
			errs[i] = err
			continue
		}
		gs = append(gs, g)
		send = append(send, i)
	}
	if len(send) == 0 {
		return dls, errs
	}
	out, rerrs := engine.RenewMany(ctx, r.l, db, gs, r.Grant().TTL) // one TTL per group (groupKey)
	for j, i := range send {
		if rerrs[j] != nil {
			errs[i] = rerrs[j]
			continue
		}
		rs[i].(*LeaseRenewer[K]).renewed(out[j], nil) // on the pool: committed
		dls[i] = out[j].Deadline
	}
	return dls, errs
}
