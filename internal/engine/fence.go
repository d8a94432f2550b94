package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/rowlease/rowlease/internal/driver"
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
	if err := l.checkConfirm(tx, g); err != nil {
		return 0, err
	}
	c := l.confirmQ()
	gen, ok, err := l.exec(ctx, tx, c, c.args(confirmVals(g)), true)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, &LostError{Key: keyText(g.Key), Op: "confirm"}
	}
	return gen, nil
}

func (l *Lease[K]) confirmQ() compiled {
	return l.shapedStmt("confirm", 0, false, false, nil, l.b.confirm)
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
	// Mark, when set, is called once fn has succeeded and gives the
	// token-checked writes that end the transaction after the fences, in
	// order, such as the success mark of the tool execution whose side
	// effect fn wrote (a Lease's TransitionOp). They are made together
	// with the fences' confirmations: one statement on PostgreSQL; on
	// MySQL and SQLite one by one after the fences, as Then would be. A
	// mark that finds its grant gone fails the transaction with the lone
	// operation's error (*LostError). Mark is called before that
	// statement, or on MySQL and SQLite after the fences; it must not
	// write.
	Mark func() []JointOp
	// Then, when set, runs after the fences and the marks: the last write
	// before the commit, for writes that are not a JointOp.
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

// all is o.Fences followed by o.Keep, in a new slice.
func (o FencedTx) all() []Fence { return append(append([]Fence(nil), o.Fences...), o.Keep...) }

// WithFences is RunFenced with only fences: fn runs in a new transaction
// on db, then every fence is checked, and the transaction commits only if
// fn succeeded and every fence still holds.
func WithFences(ctx context.Context, db TxBeginner, fences []Fence, fn func(tx *sql.Tx) error) error {
	return RunFenced(ctx, db, FencedTx{Fences: fences}, fn)
}

// RunFenced runs fn in a new transaction on db; then checks every fence in
// order (a token-checked write each, see Confirm) and makes o.Mark's
// writes; then runs o.Then; and commits. fn's writes therefore commit if
// and only if every fence holds at the end. The lease rows are locked only
// from the fences to the commit, so a heartbeat renewing them on other
// connections does not wait behind a long fn (unless fn itself writes
// those rows).
//
// When every fence was made by Lease.Fence, the confirmations and the
// marks are one statement on PostgreSQL (a data-modifying WITH, as Joint
// sends them): the fences of a tool call and its success mark cost one
// statement instead of three. On MySQL/MariaDB and SQLite they are sent
// one by one. SQLite has no statement that writes several tables; MySQL
// has the multi-table UPDATE that Joint sends, but on MariaDB it costs
// the server more CPU than the writes sent alone (BenchmarkJointOrAlone:
// about 320 µs against 200 µs for three confirmations, and no faster on
// loopback), so the ends are sent as more, cheaper statements there.
// Either way the errors are the same as one by one.
//
// A fence that no longer holds rolls everything back and returns an error
// naming it that matches ErrLost (the first such fence in order, when
// several are gone). On a multi-primary cluster
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
	if o.Flow != nil && o.Flow.singleWriter() {
		if lw := writeLocker(o); lw != nil {
			return runRouted(ctx, db, o, lw, fn)
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := runFencedBody(ctx, ctx, txIn{tx: tx, ldb: InTx(db, tx)}, o, fn); err != nil {
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
	_, err := Verify(ctx, f.l, db, f.g, false) // a pool: autocommit, so causal
	if errors.Is(err, ErrLost) {
		return true, false, nil
	}
	return true, err == nil, err
}

// multiPrimary reports whether a fence of o is on a multi-primary lease
// (never on SQLite, so never with a routed FlowDB).
func multiPrimary(o FencedTx) bool {
	for _, f := range o.all() {
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
	for _, f := range o.all() {
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

// txIn is a fenced transaction: tx for fn, o.Then and Fences of the
// caller's own; ldb, the same transaction as InTx gives it, for the
// Lease's statements (the fences made by Lease.Fence, the marks).
type txIn struct {
	tx  *sql.Tx
	ldb DB
}

// runFencedBody runs fn, the fences and o.Then; qctx is the context of
// the fences and Then.
func runFencedBody(ctx, qctx context.Context, t txIn, o FencedTx, fn func(tx *sql.Tx) error) error {
	if err := fn(t.tx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := endFenced(qctx, t, o); err != nil {
		return err
	}
	if o.Then != nil {
		return o.Then(qctx, t.tx)
	}
	return nil
}

func checkFences(ctx context.Context, t txIn, fences []Fence) error {
	for _, f := range fences {
		if f == nil {
			return invalid("fence", "nil")
		}
		// A fence of the caller's own gets the *sql.Tx; Lease.Fence's
		// the transaction with its pool (InTx).
		var db DB = t.tx
		if _, ours := f.(interface{ confirmOp() JointOp }); ours {
			db = t.ldb
		}
		if err := f.Check(ctx, db); err != nil {
			return fmt.Errorf("lease: %s fence: %w", f.Name(), err)
		}
	}
	return nil
}

// endFenced confirms o.Fences and makes o.Mark's writes: in one statement
// on PostgreSQL, else one by one (checkFences, then each mark alone; see
// RunFenced for why not MySQL's joint UPDATE).
func endFenced(ctx context.Context, t txIn, o FencedTx) error {
	ops, ok := fenceOps(o.Fences)
	if !ok || len(ops) == 0 || ops[0].w.caps().Joint != driver.JointWith {
		// One by one, o.Mark called after the fences, as always.
		if err := checkFences(ctx, t, o.Fences); err != nil {
			return err
		}
		return markAlone(ctx, t.ldb, marks(o))
	}
	all := append(ops, marks(o)...)
	if !joinable(all) {
		return oneByOne(ctx, t, o.Fences, all[len(ops):])
	}
	if i, err := checkJoint(t.ldb, all); err != nil {
		return fenceErr(o.Fences, i, err)
	}
	held, err := sendJoint(ctx, t.ldb, all)
	if err != nil {
		return fmt.Errorf("lease: fences: %w", err)
	}
	if held == nil {
		// Only a MySQL joint statement that did not change every row says
		// nothing of each write; never commit on it: ask one by one.
		return oneByOne(ctx, t, o.Fences, all[len(ops):])
	}
	for i, h := range held {
		if !h {
			return fenceErr(o.Fences, i, all[i].w.lost())
		}
	}
	return nil
}

// fenceOps are the fences' confirmations as JointOps; ok is false when a
// fence was not made by Lease.Fence (or is nil).
func fenceOps(fences []Fence) (ops []JointOp, ok bool) {
	for _, f := range fences {
		c, isOp := f.(interface{ confirmOp() JointOp })
		if f == nil || !isOp {
			return nil, false
		}
		op := c.confirmOp()
		if op.w == nil {
			return nil, false
		}
		ops = append(ops, op)
	}
	return ops, true
}

func (f fence[K]) confirmOp() JointOp {
	if f.l == nil {
		return JointOp{}
	}
	return ConfirmOp(f.l, f.g)
}

// marks are o.Mark's writes.
func marks(o FencedTx) []JointOp {
	if o.Mark == nil {
		return nil
	}
	return o.Mark()
}

// oneByOne checks the fences, then makes each mark alone.
func oneByOne(ctx context.Context, t txIn, fences []Fence, marks []JointOp) error {
	if err := checkFences(ctx, t, fences); err != nil {
		return err
	}
	return markAlone(ctx, t.ldb, marks)
}

func markAlone(ctx context.Context, tx DB, marks []JointOp) error {
	for _, m := range marks {
		if err := m.lone(ctx, tx); err != nil {
			return err
		}
	}
	return nil
}

// fenceErr is the error of write i of a fenced transaction's end: a
// fence's, named as checkFences names it, or a mark's as it is.
func fenceErr(fences []Fence, i int, err error) error {
	if i < len(fences) {
		return fmt.Errorf("lease: %s fence: %w", fences[i].Name(), err)
	}
	return err
}
