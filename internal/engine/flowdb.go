package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
)

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

// singleWriter reports whether f's dialect lets one writer in at a time
// (its driver's Caps.SingleWriter: SQLite), the only case where RunFenced
// routes f's statements into a transaction.
//
// The routing itself stays here, not in the SQLite driver: it is no
// statement text but the handling of database/sql transactions for
// engine's own types (FlowDB, Fence, RunFenced, a Lease's heartbeat
// renewals), which a driver, importing nothing of engine, cannot name.
func (f *FlowDB) singleWriter() bool { return f.dialect.driver().Caps().SingleWriter }

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

// InTx reports whether the flow has a fenced transaction open that its
// statements are routed into (only ever on SQLite; see FlowDB). While it
// has, renew its leases through the FlowDB itself, not in a batch on the
// pool, which would wait behind that transaction.
func (f *FlowDB) InTx() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.active() != nil
}

// Pool returns the pool the FlowDB was made with.
func (f *FlowDB) Pool() DB { return f.pool }

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

// savepoint is taken on SQLite right after BEGIN when renewals are routed
// into the transaction.
const savepoint = "rowlease_effect"

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
	t := txIn{tx: tx, ldb: InTx(db, tx)}
	err = runFencedBody(ctx, qctx, t, o, fn)
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
	if kerr := keepAfterFailure(qctx, t, o, ft); kerr != nil {
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
	for _, f := range o.all() {
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

// keepAfterFailure undoes fn's writes on SQLite but keeps the flow's
// leases: roll back to the savepoint (which undoes the renewals routed
// into the transaction too), make those renewals again, confirm every
// lease again, commit. ft must be finished: nothing is routed into the
// transaction any more.
func keepAfterFailure(ctx context.Context, t txIn, o FencedTx, ft *flowTx) error {
	if _, err := t.tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+savepoint); err != nil {
		return err
	}
	ft.redo(ctx)
	if err := checkFences(ctx, t, o.all()); err != nil {
		return err
	}
	if err := t.tx.Commit(); err != nil {
		return fmt.Errorf("lease: commit of the renewals (outcome unknown): %w", err)
	}
	return nil
}
