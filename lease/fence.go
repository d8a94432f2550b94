package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Fence proves, inside a caller's transaction, that a grant still holds.
// Pass fences for every level a side effect depends on (session, request)
// to RunFenced or WithFences, and write the side effect in the same
// transaction: it then commits only if every grant still holds at commit.
type Fence interface {
	// Check confirms the grant with a token-checked write that always
	// changes its row (see Lease.Confirm), so that the row stays locked
	// until the transaction ends and a multi-primary cluster certifies it
	// like any write. It returns *LostError when the grant no longer holds.
	Check(ctx context.Context, tx DB) error
	// Generation is the grant's fencing generation.
	Generation() int64
	// Name says which lease it fences (for errors).
	Name() string
}

// TxBeginner is a database that can also begin transactions (*sql.DB,
// *sqlx.DB).
type TxBeginner interface {
	DB
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Confirm proves, in one statement inside the caller's transaction tx, that
// g still holds: the token and the generation match and the lease has not
// expired by the database clock. It is a write — it renews the lease for g.TTL, never
// backwards, and always changes the row — so on MySQL and PostgreSQL the
// row stays locked until tx ends, on SQLite tx holds the write lock, and a
// multi-primary cluster (Galera) certifies it against a concurrent
// takeover on another node, which a SELECT … FOR UPDATE would not be. The
// renewal commits or rolls back with tx. It returns the generation, or
// *LostError.
func (l *Lease[K]) Confirm(ctx context.Context, tx DB, g Grant[K]) (rgen int64, rerr error) {
	if l.obs != nil {
		defer l.observe(ctx, "confirm", VerdictOK, time.Now(), &rgen, &rerr)
	}
	if err := l.checkDB(tx); err != nil {
		return 0, err
	}
	if err := l.checkGrant(g); err != nil {
		return 0, err
	}
	if err := l.checkTTL(g.TTL); err != nil {
		return 0, err
	}
	gen, ok, err := l.exec(ctx, tx, l.confirmQ(), vals("key", g.Key, "tok", g.Token.Secret(), "ttl", g.TTL.Microseconds(), "gen", g.Generation), true)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, &LostError{Key: keyText(g.Key), Op: "confirm"}
	}
	return gen, nil
}

func (l *Lease[K]) confirmQ() compiled { return compile(l.dialect, l.b.confirm()) }

// confirm is renew with two more conditions: the lease has not expired,
// and its generation is the grant's. A token can be granted again after
// another holder held the lease (a reentry that finds the row free is a
// new grant, generation+1, under the same token): a copy of the earlier
// grant must not pass.
func (s sqlBuilder) confirm() string {
	assigns := []string{s.genAssign(false), s.expAssign()}
	assigns = append(assigns, s.tail(false, nil)...)
	c := s.t.cols
	return s.update(assigns, s.keyIs()+" AND "+s.col(c.Token)+" = {tok} AND "+s.col(c.Generation)+" = {gen} AND "+s.col(c.ExpiresAt)+" > "+s.d.now())
}

// Fence returns a Fence for g named name. Its Check is Confirm.
func (l *Lease[K]) Fence(name string, g Grant[K]) Fence { return fence[K]{l: l, g: g, name: name} }

type fence[K Key] struct {
	l    *Lease[K]
	g    Grant[K]
	name string
}

func (f fence[K]) Check(ctx context.Context, tx DB) error {
	_, err := f.l.Confirm(ctx, tx, f.g)
	return err
}

func (f fence[K]) Generation() int64 { return f.g.Generation }
func (f fence[K]) Name() string      { return f.name }

// FencedTx describes a fenced transaction for RunFenced.
type FencedTx struct {
	// Fences are checked in order (session, then request: the one lock
	// order) after fn has run and before Then, so the lease rows are
	// locked only for the end of the transaction, never while fn works.
	Fences []Fence
	// Then, when set, runs after the fences: the last write before the
	// commit, such as the token-checked success mark of the tool execution
	// whose side effect fn wrote.
	Then func(ctx context.Context, tx *sql.Tx) error
	// Flow, when set, is the database the flow's heartbeat renews through.
	// On SQLite, where a write transaction excludes every other writer, it
	// routes those renewals into this transaction while it is open, so they
	// never wait behind it (see FlowDB).
	Flow *FlowDB
	// Keep are further leases of the flow (such as the tool execution's
	// own) that, on SQLite with Flow set, are confirmed again together with
	// Fences when fn or a fence fails, so that renewals made inside the
	// transaction are not lost with its rollback.
	Keep []Fence
}

// savepoint is taken on SQLite right after BEGIN when renewals are routed
// into the transaction.
const savepoint = "rowlease_effect"

// WithFences is RunFenced with only fences: fn runs in a new transaction
// on db, then every fence is checked, and the transaction commits only if
// fn succeeded and every fence still holds.
func WithFences(ctx context.Context, db TxBeginner, fences []Fence, fn func(tx *sql.Tx) error) error {
	return RunFenced(ctx, db, FencedTx{Fences: fences}, fn)
}

// RunFenced runs fn in a new transaction on db; then checks every fence in
// order (a token-checked write each, see Confirm); then runs o.Then; and
// commits. fn's writes therefore commit if and only if every fence holds at
// the end. The lease rows are locked only from the fences to the commit, so
// a heartbeat renewing them on other connections does not wait behind a
// long fn (unless fn itself writes those rows).
//
// A fence that no longer holds rolls everything back and returns an error
// naming it that matches ErrLost. On a multi-primary cluster
// (Options.MultiPrimary) a fence or o.Then that finds its grant gone is
// first checked by a causal read outside the transaction: when every grant
// of o.Fences and o.Keep still holds, the transaction ran on a node that
// was behind, and the error is ErrNodeBehind (transient: run it again). An error from fn or Then is returned as
// it is, after the rollback. A failed commit means the outcome is unknown.
//
// On SQLite with o.Flow set, the flow's renewals run inside this
// transaction while it is open (see FlowDB), and count only if it commits.
// The transaction takes the database's write lock at once, whatever the
// DSN's transaction mode (a no-op UPDATE of a fence's table), so
// that renewals only ever go into a transaction that holds it. If fn, a
// fence or Then fails while the transaction is still usable, fn's writes
// are rolled back to a savepoint, the flow's renewals made meanwhile are
// made again, the fences and o.Keep are confirmed again, and it commits, so
// the renewals stand; if that fails too, everything is rolled back and the
// error is joined to fn's. When ctx ends while the transaction is open, it
// is rolled back at once, as database/sql does — but only after the flow's
// supervisors were told that its renewals are undone (a heartbeat whose
// last committed renewal is then too old cancels the flow's work before
// the write lock is free for anyone else). Statements of RunFenced itself
// after fn (the fences, o.Then, the rollback to the savepoint and what
// follows it) run with a context that ctx does not cancel: an interrupted
// write would make SQLite roll the transaction back on its own.
//
// Routing needs a Fence made by Lease.Fence in o.Fences or o.Keep (the
// write lock is taken on its table); without one the transaction is not
// routed into.
func RunFenced(ctx context.Context, db TxBeginner, o FencedTx, fn func(tx *sql.Tx) error) (err error) {
	if isNil(db) {
		return invalid("db", "nil")
	}
	if fn == nil {
		return invalid("fn", "nil")
	}
	if o.Flow != nil && o.Flow.dialect == SQLite {
		if lw := writeLocker(o); lw != nil {
			return runRouted(ctx, db, o, lw, fn)
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := runFencedBody(ctx, ctx, tx, o, fn); err != nil {
		_ = tx.Rollback()
		if errors.Is(err, ErrLost) && ctx.Err() == nil && multiPrimary(o) {
			return behind(ctx, db, o, err)
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("lease: commit (outcome unknown): %w", err)
	}
	return nil
}

// runRouted is RunFenced on SQLite for a flow whose renewals are routed
// into the transaction (see RunFenced and FlowDB).
func runRouted(ctx context.Context, db TxBeginner, o FencedTx, lw writeLock, fn func(tx *sql.Tx) error) error {
	// database/sql rolls a transaction back on its own goroutine as soon
	// as the context it began with ends, releasing the write lock before
	// anyone could tell the flow that its renewals went with it. So the
	// transaction gets a context of its own, and RunFenced ends it.
	txctx, txcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer txcancel()
	stopBegin := context.AfterFunc(ctx, txcancel) // BEGIN may wait for the lock
	tx, err := db.BeginTx(txctx, nil)
	if !stopBegin() {
		if err == nil {
			_ = tx.Rollback()
		}
		return endedErr(ctx, nil)
	}
	if err != nil {
		return err
	}
	// Take the write lock now: with a deferred BEGIN the transaction would
	// not hold it until its first write, and a renewal routed into it
	// would wait for it. A wait here is cut short by ctx; nothing is
	// written yet. The savepoint goes with it, in one call.
	if err := lw.lockWrite(ctx, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	ft := o.Flow.enter(tx)
	aborted := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		if ft.finish() {
			ft.ended(false) // the flow hears of it while the lock is still held
			_ = tx.Rollback()
			close(aborted)
		}
	})
	defer stop()
	qctx := context.WithoutCancel(ctx)
	err = runFencedBody(ctx, qctx, tx, o, fn)
	if !ft.finish() { // ctx ended, and the transaction is being rolled back
		<-aborted
		return endedErr(ctx, err)
	}
	if ctx.Err() != nil {
		// It ended just now: roll back, as the watcher would have.
		ft.ended(false)
		_ = tx.Rollback()
		return endedErr(ctx, err)
	}
	if err == nil {
		if cerr := tx.Commit(); cerr != nil {
			ft.ended(false)
			return fmt.Errorf("lease: commit (outcome unknown): %w", cerr)
		}
		ft.ended(true)
		return nil
	}
	if kerr := keepAfterFailure(qctx, tx, o, ft); kerr != nil {
		ft.ended(false)
		_ = tx.Rollback()
		return errors.Join(err, kerr)
	}
	ft.ended(true)
	return err
}

// endedErr is the error of a routed transaction that ctx ended (rolled
// back, or never begun): err (fn's) unless it only says the transaction
// was gone, else ctx's error with its cause.
func endedErr(ctx context.Context, err error) error {
	if err != nil && !errors.Is(err, sql.ErrTxDone) {
		return err
	}
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		return fmt.Errorf("lease: fenced transaction not committed: %w: %w", ctx.Err(), cause)
	}
	return fmt.Errorf("lease: fenced transaction not committed: %w", ctx.Err())
}

// writeLock is a Fence that can take SQLite's write lock in a transaction
// without changing anything, and the savepoint with it.
type writeLock interface {
	lockWrite(ctx context.Context, tx *sql.Tx) error
}

func writeLocker(o FencedTx) writeLock {
	for _, f := range append(append([]Fence(nil), o.Fences...), o.Keep...) {
		if lw, ok := f.(writeLock); ok && lw != nil {
			return lw
		}
	}
	return nil
}

// lockWrite takes the savepoint and the write lock of a routed
// transaction, in one call (both SQLite drivers run every statement of an
// Exec without arguments).
func (f fence[K]) lockWrite(ctx context.Context, tx *sql.Tx) error {
	if f.l == nil {
		return invalid("fence", "nil lease")
	}
	_, err := tx.ExecContext(ctx, "SAVEPOINT "+savepoint+"; "+f.l.b.lockWrite())
	return err
}

// lockWrite is an UPDATE that matches no row: on SQLite it starts the
// transaction's write (and takes the database's write lock) without
// changing anything or firing a trigger.
func (s sqlBuilder) lockWrite() string {
	g := s.col(s.t.cols.Generation)
	return "UPDATE " + s.t.qname(s.d) + " SET " + g + " = " + g + " WHERE 1 = 0"
}

// causalHolder is a Fence that can tell, outside any transaction and
// causally, whether its grant still holds (only with Options.MultiPrimary).
type causalHolder interface {
	multi() bool
	holdsCausally(ctx context.Context, db DB) (multi, held bool, err error)
}

func (f fence[K]) multi() bool { return f.l != nil && f.l.multiPrimary }

func (f fence[K]) holdsCausally(ctx context.Context, db DB) (bool, bool, error) {
	if !f.l.multiPrimary {
		return false, false, nil
	}
	_, err := f.l.Verify(ctx, db, f.g, false) // a pool: autocommit, so causal
	if errors.Is(err, ErrLost) {
		return true, false, nil
	}
	return true, err == nil, err
}

// multiPrimary reports whether a fence of o is on a multi-primary lease
// (never on SQLite, so never with a routed FlowDB).
func multiPrimary(o FencedTx) bool {
	for _, f := range append(append([]Fence(nil), o.Fences...), o.Keep...) {
		if c, ok := f.(causalHolder); ok && c.multi() {
			return true
		}
	}
	return false
}

// behind turns lost, the error of a fenced transaction that was rolled
// back, into ErrNodeBehind when every fence (and o.Keep) of a
// multi-primary lease still holds by a causal read on db; otherwise it
// returns lost as it is.
func behind(ctx context.Context, db DB, o FencedTx, lost error) error {
	multi := false
	for _, f := range append(append([]Fence(nil), o.Fences...), o.Keep...) {
		c, ok := f.(causalHolder)
		if !ok {
			return lost
		}
		m, held, err := c.holdsCausally(ctx, db)
		if !m || err != nil || !held {
			return lost
		}
		multi = true
	}
	if !multi {
		return lost
	}
	return fmt.Errorf("%w (%v)", ErrNodeBehind, lost)
}

// runFencedBody runs fn, the fences and o.Then; qctx is the context of
// the fences and Then.
func runFencedBody(ctx, qctx context.Context, tx *sql.Tx, o FencedTx, fn func(tx *sql.Tx) error) error {
	if err := fn(tx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkFences(qctx, tx, o.Fences); err != nil {
		return err
	}
	if o.Then != nil {
		return o.Then(qctx, tx)
	}
	return nil
}

func checkFences(ctx context.Context, tx *sql.Tx, fences []Fence) error {
	for _, f := range fences {
		if f == nil {
			return invalid("fence", "nil")
		}
		if err := f.Check(ctx, tx); err != nil {
			return fmt.Errorf("lease: %s fence: %w", f.Name(), err)
		}
	}
	return nil
}

// keepAfterFailure undoes fn's writes on SQLite but keeps the flow's
// leases: roll back to the savepoint (which undoes the renewals routed
// into the transaction too), make those renewals again, confirm every
// lease again, commit. ft must be finished: nothing is routed into the
// transaction any more.
func keepAfterFailure(ctx context.Context, tx *sql.Tx, o FencedTx, ft *flowTx) error {
	if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+savepoint); err != nil {
		return err
	}
	ft.redo(ctx)
	if err := checkFences(ctx, tx, append(append([]Fence(nil), o.Fences...), o.Keep...)); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("lease: commit of the renewals (outcome unknown): %w", err)
	}
	return nil
}

// FlowDB is the database a flow's heartbeat renews its leases through: a
// pool, except that on SQLite, while RunFenced runs one of the flow's
// transactions with FencedTx.Flow set to it, statements go into that
// transaction. SQLite lets one writer in at a time, so a renewal sent on
// another connection would wait behind the flow's own transaction until
// its trust deadline passed. Inside the transaction it runs at once; and
// no one else can take the lease over while that transaction holds the
// write lock. On MySQL and PostgreSQL a FlowDB always uses the pool.
//
// A renewal made inside a transaction is undone if the transaction does
// not commit, so it may move a trust deadline only provisionally: renew
// through Route, which says where the statement went and lets the renewer
// hear when the transaction ends (package heartbeat does this). The
// transaction ends only after every Route into it is Done, and a
// transaction that does not commit tells the renewers before it releases
// the write lock.
//
// A flow may run several fenced transactions at once (parallel tool
// calls). Each takes the write lock before it is routed into (see
// RunFenced), so statements only ever go into the one that holds it, and
// never wait for the lock inside a transaction; while none holds it they
// go to the pool.
//
// Statements routed into a transaction run with a context that is not
// cancelled by the caller's (an interrupted write would roll back the whole
// transaction on SQLite). A FlowDB is safe for concurrent use.
type FlowDB struct {
	pool    DB
	dialect Dialect

	mu   sync.Mutex
	idle sync.Cond // signalled when a transaction's last Route is Done
	txs  []*flowTx // open transactions that hold the write lock, oldest first
}

// flowTx is one of a flow's fenced transactions, routed into from when it
// holds the write lock until it ends. Its fields are guarded by FlowDB.mu.
type flowTx struct {
	f      *FlowDB
	tx     *sql.Tx
	ending bool // finish was called: nothing more is routed into it
	pins   int  // Routes into it that are not Done
	hooks  []*txHook
}

// txHook is what a renewer asked to hear about a transaction (Route.OnEnd).
type txHook struct {
	end  func(committed bool)
	redo func(ctx context.Context, db DB) error
	lost bool // its redo failed: its renewals are gone even if tx commits
}

// NewFlowDB returns the FlowDB of one flow on pool (a *sql.DB or *sqlx.DB)
// in dialect d.
func NewFlowDB(pool DB, d Dialect) *FlowDB {
	f := &FlowDB{pool: pool, dialect: d}
	f.idle.L = &f.mu
	return f
}

func (f *FlowDB) enter(tx *sql.Tx) *flowTx {
	t := &flowTx{f: f, tx: tx}
	f.mu.Lock()
	if f.idle.L == nil {
		f.idle.L = &f.mu
	}
	f.txs = append(f.txs, t)
	f.mu.Unlock()
	return t
}

// active is the transaction to route into, or nil. f.mu is held.
func (f *FlowDB) active() *flowTx {
	for i := len(f.txs) - 1; i >= 0; i-- {
		if !f.txs[i].ending {
			return f.txs[i]
		}
	}
	return nil
}

// finish stops routing into t and waits until every Route into it is
// Done. It reports false if t was finished already (RunFenced and the
// watcher of its context each try; the first ends the transaction).
func (t *flowTx) finish() bool {
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.ending {
		return false
	}
	t.ending = true
	for t.pins > 0 {
		f.idle.Wait()
	}
	for i, x := range f.txs {
		if x == t {
			f.txs = append(f.txs[:i:i], f.txs[i+1:]...)
			break
		}
	}
	return true
}

// redo makes again, inside the transaction, the renewals that a rollback
// to the savepoint undid. A hook whose redo fails hears that its
// renewals were not committed, whatever the transaction's end.
func (t *flowTx) redo(ctx context.Context) {
	t.f.mu.Lock()
	hooks := append([]*txHook(nil), t.hooks...)
	t.f.mu.Unlock()
	db := routedTx{tx: t.tx, pool: t.f.pool}
	for _, h := range hooks {
		if h.redo != nil && h.redo(ctx, db) != nil {
			h.lost = true
		}
	}
}

// ended tells every hook how the transaction ended. It runs before a
// rollback and after a commit.
func (t *flowTx) ended(committed bool) {
	t.f.mu.Lock()
	hooks := t.hooks
	t.hooks = nil
	t.f.mu.Unlock()
	for _, h := range hooks {
		h.end(committed && !h.lost)
	}
}

// FlowRoute is where one renewal of a flow goes: the flow's open
// transaction (see FlowDB) or its pool. Call Done when the statement has
// returned (and OnEnd, if wanted, before that).
type FlowRoute struct {
	db   DB
	t    *flowTx
	done bool
}

// Route returns the route of the next renewal of the flow. While a Route
// into a transaction is not Done, that transaction does not end.
func (f *FlowDB) Route() *FlowRoute {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.active(); t != nil {
		t.pins++
		return &FlowRoute{db: routedTx{tx: t.tx, pool: f.pool}, t: t}
	}
	return &FlowRoute{db: f.pool}
}

// DB is the database to send the renewal on.
func (r *FlowRoute) DB() DB { return r.db }

// Tx identifies the transaction the route goes into, or is nil when it
// goes to the pool, where a statement commits at once. Renewals made
// through routes with the same Tx commit or roll back together.
func (r *FlowRoute) Tx() any {
	if r.t == nil {
		return nil
	}
	return r.t
}

// OnEnd asks to hear how the route's transaction ends: end(true) after it
// committed, end(false) before it rolls back (while it still holds the
// write lock). redo, when not nil, is called when the transaction rolls
// back to its savepoint to keep the flow's leases (see RunFenced): it
// makes the renewal again on db, inside the transaction; an error from it
// means end(false). OnEnd does nothing on a route to the pool, and must
// be called before Done. Call it once per transaction and renewer.
func (r *FlowRoute) OnEnd(end func(committed bool), redo func(ctx context.Context, db DB) error) {
	if r.t == nil || r.done || end == nil {
		return
	}
	r.t.f.mu.Lock()
	r.t.hooks = append(r.t.hooks, &txHook{end: end, redo: redo})
	r.t.f.mu.Unlock()
}

// Done ends the route; the transaction may end from now on. It is safe to
// call twice.
func (r *FlowRoute) Done() {
	if r.t == nil || r.done {
		return
	}
	r.done = true
	f := r.t.f
	f.mu.Lock()
	r.t.pins--
	if r.t.pins == 0 {
		f.idle.Broadcast()
	}
	f.mu.Unlock()
}

// current is the transaction to route into, or the pool.
func (f *FlowDB) current() DB {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.active(); t != nil {
		return routedTx{tx: t.tx, pool: f.pool}
	}
	return f.pool
}

// ExecContext runs on the current database (see FlowDB).
func (f *FlowDB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return f.current().ExecContext(ctx, query, args...)
}

// QueryContext runs on the current database (see FlowDB).
func (f *FlowDB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return f.current().QueryContext(ctx, query, args...)
}

// QueryRowContext runs on the current database (see FlowDB).
func (f *FlowDB) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return f.current().QueryRowContext(ctx, query, args...)
}

// routedTx is a transaction borrowed by a FlowDB: its statements do not
// inherit the caller's cancellation. A transaction that ended between the
// routing and the statement refuses it with sql.ErrTxDone before running
// anything; the statement then goes to the pool, where the write lock is
// free again. (A statement on a Route cannot meet that: the transaction
// waits for its Routes.)
type routedTx struct {
	tx   *sql.Tx
	pool DB
}

func (r routedTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	res, err := r.tx.ExecContext(context.WithoutCancel(ctx), q, args...)
	if errors.Is(err, sql.ErrTxDone) {
		return r.pool.ExecContext(ctx, q, args...)
	}
	return res, err
}

func (r routedTx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	rows, err := r.tx.QueryContext(context.WithoutCancel(ctx), q, args...)
	if errors.Is(err, sql.ErrTxDone) {
		return r.pool.QueryContext(ctx, q, args...)
	}
	return rows, err
}

func (r routedTx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	row := r.tx.QueryRowContext(context.WithoutCancel(ctx), q, args...)
	if errors.Is(row.Err(), sql.ErrTxDone) {
		return r.pool.QueryRowContext(ctx, q, args...)
	}
	return row
}

// resolve picks the database a statement runs on: a FlowDB's current one.
func resolve(db DB) DB {
	if f, ok := db.(*FlowDB); ok && f != nil {
		return f.current()
	}
	return db
}
