package engine

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"time"

	"github.com/rowlease/rowlease/internal/driver"
)

// JointOp is one token-checked write on a held lease — a confirmation,
// a transition or a release — to be made together with others by Joint or
// at the end of a fenced transaction (FencedTx.Mark). Build it with
// Lease.ConfirmOp, Lease.TransitionOp or Lease.ReleaseOp; the zero
// JointOp is invalid. Its input is checked when it is used, before any
// SQL, as the lone operation checks it.
type JointOp struct{ w jointWrite }

// ConfirmOp is Confirm as a JointOp: g still holds (token and generation
// match, not expired by the database clock), proved by a write that
// renews it for g.TTL and always changes its row.
func ConfirmOp[K Key](l *Lease[K], g Grant[K]) JointOp {
	return JointOp{&leaseWrite[K]{l: l, kind: jointConfirm, g: g}}
}

// TransitionOp is Transition as a JointOp: the same token-, generation-
// and (with o.From) state-checked change of g's row.
func TransitionOp[K Key](l *Lease[K], g Grant[K], o ChangeOptions) JointOp {
	return JointOp{&leaseWrite[K]{l: l, kind: jointTransition, g: g, o: o}}
}

// ReleaseOp is Release as a JointOp: g's row is freed if g still holds it.
func ReleaseOp[K Key](l *Lease[K], g Grant[K]) JointOp {
	return JointOp{&leaseWrite[K]{l: l, kind: jointRelease, g: g}}
}

// Joint makes the writes ops, each on a lease row of its own (of one
// table or of several), and returns one error per op, in order: nil when
// the write was made, or what the lone operation (Confirm, Transition,
// Release) would have returned — *LostError when its grant no longer
// holds (or, for a transition, its row is in another state), which
// changed nothing on that row. Each write succeeds or is lost on its own,
// as if each had been sent alone; Joint only sends fewer statements:
//
//   - PostgreSQL: one statement, whatever happens. Each write is an
//     UPDATE … RETURNING in a data-modifying WITH, and a final SELECT
//     reports each one's generation, or NULL for a write that matched no
//     row: the writes that match are made, the others are lost.
//   - MySQL/MariaDB: one multi-table UPDATE, which changes every row or
//     none (the rows are joined, so one row that does not match leaves
//     the join empty). Every one of these writes changes the row it
//     matches, so the count of rows changed proves that all were made:
//     when it is the number of ops, each write was made; otherwise none
//     was, and each is sent again alone, so the ones that hold are made
//     and the others report their loss exactly as alone (with
//     Options.MultiPrimary, a miss is first sent again causally, as
//     alone). One statement when every grant holds, 1 + len(ops) when one
//     does not. Every write is sent alone instead when one of them is of a
//     Lease with a declared coarse expiry column (Options.ExpiryResolution),
//     whose renewal may leave its row unchanged, or when a table appears
//     twice. It saves round trips, not the server's work: on MariaDB a
//     multi-table UPDATE of three rows costs more CPU than three UPDATEs
//     (BenchmarkJointOrAlone: about 320 µs against 200 µs on the test
//     server), which is why the library's own flow (RunFenced,
//     request.Runner) sends its writes alone on MySQL.
//   - SQLite: one statement per op, in order. SQLite has no statement
//     that updates several tables (no multi-table UPDATE, and a WITH
//     clause holds only SELECTs); Joint sends each write alone.
//
// A single op is sent alone on every dialect.
//
// Rows are locked in the order of ops: pass them in the one lock order
// (session, request, tool execution). MySQL reads the joined rows in the
// order the tables are listed, and PostgreSQL runs each part of the WITH
// when the final SELECT reads it, in order (what both do, not what their
// documentation promises: a deadlock the database breaks is a victim's
// error, sent again in autocommit as below).
//
// Bad input — a zero JointOp, an op that its lone operation would refuse,
// ops of different dialects, two ops on one row (PostgreSQL makes only
// one of two updates of a row in one statement) — sends nothing: the
// invalid op's entry is its *ValidationError and every other entry a
// *ValidationError saying it was not sent. A driver error of the joint
// statement is every entry's error: the outcome of every write is unknown
// (as for a lone write that failed so). On a pool (autocommit), a
// deadlock, serialization or certification victim is sent again, as for
// every operation; inside a transaction it is returned at once.
//
// Each op is reported to its Lease's Observer as the lone operation would
// be (confirm, transition, release), with the joint statement's start and
// duration; a write sent again alone is reported by that send.
//
// db is any DB, as for every operation: run Joint inside a transaction of
// yours, or on a pool, where the joint statement is one autocommit
// statement.
func Joint(ctx context.Context, db DB, ops ...JointOp) []error {
	errs := make([]error, len(ops))
	if i, err := checkJoint(db, ops); err != nil {
		for j := range errs {
			errs[j] = invalid("joint op", "not sent: op "+strconv.Itoa(i)+" is invalid")
		}
		errs[i] = err
		return errs
	}
	if !joinable(ops) {
		for i, op := range ops {
			errs[i] = op.lone(ctx, db)
		}
		return errs
	}
	held, err := sendJoint(ctx, db, ops)
	for i, op := range ops {
		switch {
		case err != nil:
			errs[i] = err
		case held == nil: // MySQL: none was made; each alone says which holds
			errs[i] = op.lone(ctx, db)
		case !held[i]:
			errs[i] = op.w.lost()
		}
	}
	return errs
}

type jointKind int

const (
	jointConfirm jointKind = iota
	jointTransition
	jointRelease
)

// jointWrite is a JointOp's write, whatever its Lease's key type.
type jointWrite interface {
	dialect() Dialect
	// caps are what the dialect's statements can do (its driver's).
	caps() driver.Caps
	// check validates the input, as the lone operation does.
	check(db DB) error
	// probe runs the first-use check, as the lone operation does.
	probe(ctx context.Context, db DB) error
	// builder writes the op's table's SQL, with columns qualified by alias
	// when it is set (MySQL's multi-table UPDATE).
	builder(alias string) sqlBuilder
	// parts are the assignments and the condition of the write.
	parts(b sqlBuilder) (assigns []string, where string)
	vals() map[string]any
	// shape writes what decides the write's SQL (not its values): two
	// writes of one shape at one position build the same text.
	shape(b *strings.Builder)
	// row names the row: its table and key.
	row() string
	coarse() bool
	// lone makes the write alone: Confirm, Transition or Release.
	lone(ctx context.Context, db DB) error
	// lost is the lone operation's error for a grant that no longer holds.
	lost() error
	// report tells the Lease's Observer of the write.
	report(ctx context.Context, start time.Time, err error)
}

type leaseWrite[K Key] struct {
	l    *Lease[K]
	kind jointKind
	g    Grant[K]
	o    ChangeOptions // jointTransition
}

// name is the lone operation's name, as LostError.Op and Observer say it.
func (w *leaseWrite[K]) name() string {
	return [...]string{"confirm", "transition", "release"}[w.kind]
}

func (w *leaseWrite[K]) dialect() Dialect { return w.l.dialect }

func (w *leaseWrite[K]) caps() driver.Caps { return w.l.caps }

func (w *leaseWrite[K]) check(db DB) error {
	switch w.kind {
	case jointConfirm:
		return w.l.checkConfirm(db, w.g)
	case jointTransition:
		return w.l.checkChange(db, w.g, w.o)
	}
	return w.l.checkHeld(db, w.g)
}

// probe is the lone operation's: Confirm, which runs inside fenced
// transactions, relies on an earlier operation's check (see First use).
func (w *leaseWrite[K]) probe(ctx context.Context, db DB) error {
	if w.kind == jointConfirm {
		return nil
	}
	return w.l.probe(ctx, db, false)
}

func (w *leaseWrite[K]) builder(alias string) sqlBuilder {
	b := w.l.b
	b.alias = alias
	return b
}

func (w *leaseWrite[K]) parts(b sqlBuilder) ([]string, string) {
	switch w.kind {
	case jointConfirm:
		return b.confirmParts()
	case jointTransition:
		return b.changeParts(w.o.From, w.o.To != "", w.o.Set, w.o.Keep)
	}
	return b.releaseParts()
}

func (w *leaseWrite[K]) vals() map[string]any {
	switch w.kind {
	case jointConfirm:
		return confirmVals(w.g)
	case jointTransition:
		return changeVals(w.g, w.o)
	}
	return grantVals(w.g)
}

func (w *leaseWrite[K]) shape(b *strings.Builder) {
	if w.kind != jointTransition {
		shapeKey(b, w.l.shape, w.name(), 0, false, false, nil)
		return
	}
	shapeKey(b, w.l.shape, w.name(), len(w.o.From), w.o.To != "", w.o.Keep, w.o.Set)
}

func (w *leaseWrite[K]) row() string  { return w.l.table.name + "\x00" + keyText(w.g.Key) }
func (w *leaseWrite[K]) coarse() bool { return w.l.coarse }

func (w *leaseWrite[K]) lone(ctx context.Context, db DB) error {
	var err error
	switch w.kind {
	case jointConfirm:
		_, err = w.l.Confirm(ctx, db, w.g)
	case jointTransition:
		_, err = w.l.Transition(ctx, db, w.g, w.o)
	default:
		err = w.l.Release(ctx, db, w.g)
	}
	return err
}

func (w *leaseWrite[K]) lost() error { return &LostError{Key: keyText(w.g.Key), Op: w.name()} }

func (w *leaseWrite[K]) report(ctx context.Context, start time.Time, err error) {
	if w.l.obs == nil {
		return
	}
	gen := w.g.Generation
	if err != nil && w.kind == jointConfirm {
		gen = 0 // as Confirm reports a failure
	}
	w.l.observe(ctx, w.name(), VerdictOK, start, &gen, &err)
}

// lone makes op's write alone (the zero JointOp is invalid).
func (op JointOp) lone(ctx context.Context, db DB) error {
	if op.w == nil {
		return errZeroOp()
	}
	return op.w.lone(ctx, db)
}

func errZeroOp() error {
	return invalid("joint op", "zero JointOp; build it with a Lease's ConfirmOp, TransitionOp or ReleaseOp")
}

// checkJoint validates ops before any SQL: each op's input, one dialect,
// no row twice. It returns the index of the first invalid op and its error.
func checkJoint(db DB, ops []JointOp) (int, error) {
	rows := make(map[string]bool, len(ops))
	for i, op := range ops {
		if op.w == nil {
			return i, errZeroOp()
		}
		if err := op.w.check(db); err != nil {
			return i, err
		}
		if d := ops[0].w.dialect(); op.w.dialect() != d {
			return i, invalid("joint op", "a "+op.w.dialect().String()+" lease among "+d.String()+" ones")
		}
		if rows[op.w.row()] {
			return i, invalid("joint op", "a second write on one row")
		}
		rows[op.w.row()] = true
	}
	return 0, nil
}

// joinable reports whether ops go in one statement (see Joint): two or
// more valid ops, on PostgreSQL, or on MySQL without a coarse expiry
// column or a table named twice. It sends nothing.
func joinable(ops []JointOp) bool {
	if len(ops) < 2 {
		return false
	}
	tables := make(map[string]bool, len(ops))
	for _, op := range ops {
		if op.w == nil {
			return false
		}
		switch op.w.caps().Joint {
		case driver.JointWith:
			continue
		case driver.JointMultiUpdate:
			t := op.w.builder("").t.name
			if op.w.coarse() || tables[t] {
				return false
			}
			tables[t] = true
		default:
			return false
		}
	}
	return true
}

// jointSQL writes the joint statement of ops (joinable, valid) and its
// arguments. The text is built once per shape of ops (see shaped).
func jointSQL(ops []JointOp) (string, []any) {
	var key strings.Builder
	key.WriteString("joint")
	key.WriteByte(1)
	for _, op := range ops {
		op.w.shape(&key)
	}
	c := shaped(key.String(), func() compiled { return compileJoint(ops) })
	all := map[string]any{}
	for i, op := range ops {
		prefix := strconv.Itoa(i) + "."
		for k, v := range op.w.vals() {
			all[prefix+k] = v
		}
	}
	return c.query, c.args(all)
}

// compileJoint builds the joint statement of ops: its text, as the
// driver writes it from each op's write, and the names of its arguments in
// placeholder order.
func compileJoint(ops []JointOp) compiled {
	kind := ops[0].w.caps().Joint
	parts := make([]driver.JointPart, len(ops))
	for i, op := range ops {
		p := driver.JointPart{Alias: "j" + strconv.Itoa(i)}
		// Each op's placeholders get a name of their own: {key} of op 1
		// becomes {1.key}.
		prefix := strconv.Itoa(i) + "."
		if kind == driver.JointWith {
			b := op.w.builder("")
			assigns, where := op.w.parts(b)
			p.Update, p.Generation = paramPrefix(prefix, b.update(assigns, where)), b.col(b.t.cols.Generation)
		} else {
			b := op.w.builder(p.Alias)
			assigns, where := op.w.parts(b)
			p.Table, p.Set, p.Where = b.t.qname(b.drv), paramPrefix(prefix, assignList(assigns)), paramPrefix(prefix, where)
		}
		parts[i] = p
	}
	return compile(ops[0].w.dialect(), ops[0].w.builder("").drv.Joint(parts))
}

// sendJoint sends the joint statement of ops (joinable, valid) and
// returns which writes were made. On MySQL, held is nil when not every
// write matched: then none was made, and nothing is reported to the
// Observers (each write is sent again alone, which reports itself).
func sendJoint(ctx context.Context, db DB, ops []JointOp) (held []bool, err error) {
	start := time.Now()
	defer func() {
		if err == nil && held == nil {
			return
		}
		for i, op := range ops {
			e := err
			if e == nil && !held[i] {
				e = op.w.lost()
			}
			op.w.report(ctx, start, e)
		}
	}()
	for _, op := range ops {
		if err := op.w.probe(ctx, db); err != nil {
			return nil, err
		}
	}
	d := ops[0].w.dialect()
	q, args := jointSQL(ops)
	err = RetryVictims(ctx, d, db, func() error {
		held = nil
		if ops[0].w.caps().Joint == driver.JointWith {
			gens := make([]sql.NullInt64, len(ops))
			dest := make([]any, len(ops))
			for i := range gens {
				dest[i] = &gens[i]
			}
			if err := resolve(db).QueryRowContext(ctx, q, args...).Scan(dest...); err != nil {
				return err
			}
			held = make([]bool, len(ops))
			for i, g := range gens {
				held[i] = g.Valid
			}
			return nil
		}
		res, err := resolve(db).ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == int64(len(ops)) {
			held = make([]bool, len(ops))
			for i := range held {
				held[i] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return held, nil
}
