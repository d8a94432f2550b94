package engine

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/rowlease/rowlease/internal/driver"
)

// AcquireOp is an Acquire to be made together with a Create by
// AcquireCreate. Build it with Lease.AcquireOp; the zero AcquireOp is
// invalid. Its input is checked when it is used, before any SQL, as
// AcquireWith checks it.
type AcquireOp[K Key] struct {
	l      *Lease[K]
	key    K
	holder string
	ttl    time.Duration
	o      AcquireOptions
}

// AcquireOp is AcquireWith as an AcquireOp: the lease on key taken for
// holder, for ttl, with the options o.
func NewAcquireOp[K Key](l *Lease[K], key K, holder string, ttl time.Duration, o AcquireOptions) AcquireOp[K] {
	return AcquireOp[K]{l: l, key: key, holder: holder, ttl: ttl, o: o}
}

// CreateOp is a Create to be made together with an Acquire by
// AcquireCreate. Build it with Lease.CreateOp; the zero CreateOp is
// invalid. Its input is checked when it is used, before any SQL, as Create
// checks it.
type CreateOp[K Key] struct {
	l      *Lease[K]
	key    K
	holder string
	ttl    time.Duration
	o      CreateOptions
}

// CreateOp is Create as a CreateOp: a new row key inserted already held by
// holder, for ttl, with the options o.
func NewCreateOp[K Key](l *Lease[K], key K, holder string, ttl time.Duration, o CreateOptions) CreateOp[K] {
	return CreateOp[K]{l: l, key: key, holder: holder, ttl: ttl, o: o}
}

// AcquireCreate takes the lease of a (as AcquireWith) and inserts the row
// of c already held (as Create), both or neither: a lock and the new row
// that its holder stands for, such as a session taken for a new request
// and the request's own row. It returns both grants, each as its lone
// operation would.
//
// On PostgreSQL it is one statement, wherever it runs (a pool, where it is
// one autocommit statement, or a transaction of yours): a data-modifying
// WITH whose INSERT selects from the UPDATE, so that the row is inserted
// only if the acquire matched, and a unique-key violation undoes the
// acquire with the statement. On MySQL and SQLite, which cannot write two
// tables in one INSERT or UPDATE (MySQL has no data-modifying WITH and
// SQLite's WITH holds only SELECTs), it is AcquireWith and then Create on
// db, which must then be a transaction (a *sql.Tx, a *sql.Conn inside one,
// a FlowDB with its transaction open): both or neither is then your
// commit or rollback. On a pool there it is a *ValidationError and sends
// nothing.
//
// Errors, with nothing written unless said otherwise:
//
//   - *ValidationError (ErrInvalid): bad input, as the lone operations
//     check it; a zero op; a and c of different dialects; on MySQL and
//     SQLite, a db in autocommit. Nothing is sent.
//   - The acquire did not match: what AcquireWith returns after its one
//     read — *ConflictError (ErrHeld), ErrNotFound, *StateError. No row
//     was inserted.
//   - *DuplicateKeyError (ErrExists): the row of c (or another unique key
//     of its table) exists. On PostgreSQL the acquire was undone with it.
//   - Any other error is the driver's, returned as it is and never sent
//     again (not even a deadlock victim's, which IsRetryable picks out):
//     on PostgreSQL in autocommit its outcome is unknown — both writes
//     may have committed, or neither. The grants returned with it then
//     hold what was sent (keys, holders, tokens, TTLs; Generation 0 for
//     the acquire, whose generation is unknown, and 1 for the created
//     row), so that the caller can find out and give back what took
//     effect: Inspect a's row (its holder is the one sent, make it unique)
//     and Release it with the generation read, and Delete c's row; both
//     are token-checked, so neither touches what is not this call's. A
//     caller in a transaction rolls it back instead.
//
// Each write is reported to its Lease's Observer as the lone operation
// would be — acquire (with the read after a miss reported as inspect) and
// create — with the statement's start and duration; the create is not
// reported when the acquire did not match (it was never tried alone).
// Bad input is reported as both operations' error.
func AcquireCreate[A, C Key](ctx context.Context, db DB, a AcquireOp[A], c CreateOp[C]) (Grant[A], Grant[C], error) {
	if a.l == nil || c.l == nil {
		return Grant[A]{}, Grant[C]{}, invalid("acquire-create", "zero op; build it with a Lease's AcquireOp and CreateOp")
	}
	if !a.l.caps.AcquireCreate {
		if err := a.checkJoint(db, c); err != nil {
			a.report(ctx, time.Now(), 0, err)
			c.report(ctx, time.Now(), 0, err)
			return Grant[A]{}, Grant[C]{}, err
		}
		ga, err := a.l.AcquireWith(ctx, db, a.key, a.holder, a.ttl, a.o)
		if err != nil {
			return Grant[A]{}, Grant[C]{}, err
		}
		gc, err := c.l.Create(ctx, db, c.key, c.holder, c.ttl, c.o)
		if err != nil {
			return Grant[A]{}, Grant[C]{}, err
		}
		return ga, gc, nil
	}
	ga, gc, _, err := acquireCreateOne(ctx, db, a, c, nil, nil)
	return ga, gc, err
}

// checkJoint checks a's and c's input, and that they can go together on
// db.
func (a AcquireOp[K]) checkJoint(db DB, c interface {
	check(db DB) error
	dialect() Dialect
}) error {
	if err := a.check(db); err != nil {
		return err
	}
	if err := c.check(db); err != nil {
		return err
	}
	if d := c.dialect(); d != a.l.dialect {
		return invalid("acquire-create", "a "+d.String()+" create with a "+a.l.dialect.String()+" acquire")
	}
	if !a.l.caps.AcquireCreate && autocommit(db) {
		return invalid("acquire-create", "on "+a.l.dialect.String()+" it needs a transaction: both or neither is its commit")
	}
	return nil
}

func (a AcquireOp[K]) check(db DB) error {
	if err := a.l.checkNew(db, a.key, a.holder, a.ttl); err != nil {
		return err
	}
	if err := a.l.checkIn("states", a.o.InStates); err != nil {
		return err
	}
	return a.l.checkWrites(a.o.SetState, a.o.Set)
}

func (c CreateOp[K]) check(db DB) error {
	if err := c.l.checkNew(db, c.key, c.holder, c.ttl); err != nil {
		return err
	}
	return c.l.checkWrites(c.o.State, c.o.Set)
}

func (c CreateOp[K]) dialect() Dialect { return c.l.dialect }

// report tells a's Observer of the acquire (gen: the generation it set).
func (a AcquireOp[K]) report(ctx context.Context, start time.Time, gen int64, err error) {
	if a.l.obs != nil {
		a.l.observe(ctx, "acquire", VerdictAcquired, start, &gen, &err)
	}
}

// report tells c's Observer of the create.
func (c CreateOp[K]) report(ctx context.Context, start time.Time, gen int64, err error) {
	if c.l.obs != nil {
		c.l.observe(ctx, "create", VerdictAcquired, start, &gen, &err)
	}
}

// acquireCreateOne is AcquireCreate on PostgreSQL: one statement. With u
// (AcquireCreateUnless), the statement first reads the row u names into
// dest and writes nothing if it exists (found).
func acquireCreateOne[A, C Key](ctx context.Context, db DB, a AcquireOp[A], c CreateOp[C], u *Unless, dest []any) (ga Grant[A], gc Grant[C], found bool, err error) {
	start := time.Now()
	missed := false
	defer func() {
		if found {
			return // a read: neither write was made (see AcquireCreateUnless)
		}
		var gen int64
		if err == nil {
			gen = ga.Generation
		}
		a.report(ctx, start, gen, err)
		if !missed {
			if err == nil {
				gen = gc.Generation
			}
			c.report(ctx, start, gen, err)
		}
	}()
	if err := a.checkJoint(db, c); err != nil {
		return Grant[A]{}, Grant[C]{}, false, err
	}
	if u != nil {
		if err := c.l.checkUnless(*u, dest); err != nil {
			return Grant[A]{}, Grant[C]{}, false, err
		}
	}
	if err := a.l.probe(ctx, db, false); err != nil {
		return Grant[A]{}, Grant[C]{}, false, err
	}
	if err := c.l.probe(ctx, db, false); err != nil {
		return Grant[A]{}, Grant[C]{}, false, err
	}
	atok := a.o.Token
	if atok.isZero() {
		if atok, err = NewToken(); err != nil {
			return Grant[A]{}, Grant[C]{}, false, err
		}
	}
	ctok, err := NewToken()
	if err != nil {
		return Grant[A]{}, Grant[C]{}, false, err
	}
	am := heldVals(a.key, atok, a.holder, a.ttl, a.o.SetState, a.o.InStates, a.o.Set)
	cm := heldVals(c.key, ctok, c.holder, c.ttl, c.o.State, nil, c.o.Set)
	all := make(map[string]any, len(am)+len(cm)+2)
	for k, v := range am {
		all["a."+k] = v
	}
	for k, v := range cm {
		all["c."+k] = v
	}
	if u != nil {
		u.addVals(all)
	}
	q := acquireCreateStmt(a, c, u)
	on, done, perr := a.l.pin(ctx, db)
	if perr != nil {
		return Grant[A]{}, Grant[C]{}, false, perr
	}
	defer done()
	db = on
	sent := a.l.clock.Now()
	// What was sent, with the acquire's generation unknown (0): returned
	// with a driver error, for the caller to give back (see AcquireCreate).
	ga = Grant[A]{Key: a.key, Holder: a.holder, Token: atok, TTL: a.ttl}
	gc = Grant[C]{Key: c.key, Holder: c.holder, Token: ctok, Generation: 1, TTL: c.ttl}
	var agen, cgen sql.NullInt64
	if u == nil {
		err = resolve(db).QueryRowContext(ctx, q.query, q.args(all)...).Scan(&agen, &cgen)
	} else {
		found, err = scanUnless(ctx, db, q, all, &agen, &cgen, dest)
	}
	if err != nil {
		if IsDuplicateKey(err) {
			return Grant[A]{}, Grant[C]{}, false, c.l.translate(c.key, err)
		}
		return ga, gc, false, err
	}
	if found {
		return Grant[A]{}, Grant[C]{}, true, nil
	}
	if !agen.Valid {
		missed = true
		return Grant[A]{}, Grant[C]{}, false, a.l.whyNot(ctx, db, a.key, a.o.InStates)
	}
	ga.Generation, ga.Deadline = agen.Int64, a.l.deadline(sent, a.ttl)
	if !cgen.Valid {
		// The acquire was made and the row not inserted: something of the
		// database's own (a trigger) skipped the insert.
		return ga, gc, false, errNotInserted
	}
	gc.Generation, gc.Deadline = cgen.Int64, c.l.deadline(sent, c.ttl)
	return ga, gc, false, nil
}

// acquireCreateStmt is the statement of acquireCreateOne for a, c and u
// (nil: AcquireCreate), compiled once per shape.
func acquireCreateStmt[A, C Key](a AcquireOp[A], c CreateOp[C], u *Unless) compiled {
	var key strings.Builder
	shapeKey(&key, a.l.shape, a.o.acquireShape("acquire-create:acquire"), len(a.o.InStates), a.o.SetState != "", false, a.o.Set)
	shapeKey(&key, c.l.shape, "acquire-create:create", 0, c.o.State != "", false, c.o.Set)
	if u != nil {
		u.shape(&key)
	}
	return shaped(key.String(), func() compiled { return compile(a.l.dialect, acquireCreateSQL(a.l.b, c.l.b, a.o, c.o, u)) })
}

var errNotInserted = errors.New("lease: acquire-create: the acquire was made but the row was not inserted")

// acquireCreateSQL is AcquireCreate's statement where it is one
// (Caps.AcquireCreate: PostgreSQL), as the driver writes it from a's
// acquire (as AcquireWith writes it) and c's insert (as Create writes
// it); a's parameters are named {a.…}, c's {c.…}. With u
// (AcquireCreateUnless), the read of the row u names comes first, its
// parameters named {u.m0}, ….
func acquireCreateSQL(ab, cb sqlBuilder, ao AcquireOptions, co CreateOptions, u *Unless) string {
	cols, vals := cb.createParts(co.State != "", co.Set)
	assigns, where := ab.acquireParts(ao.InStates, ao.SetState != "", ao.Set, ao.Token.isZero())
	p := driver.AcquireCreateParams{
		AcquireTable:      ab.t.qname(ab.drv),
		AcquireSet:        paramPrefix("a.", assignList(assigns)),
		AcquireWhere:      paramPrefix("a.", where),
		AcquireGeneration: ab.col(ab.t.cols.Generation),
		CreateTable:       cb.t.qname(cb.drv),
		CreateColumns:     strings.Join(cols, ", "),
		CreateValues:      paramPrefix("c.", strings.Join(vals, ", ")),
		CreateGeneration:  cb.col(cb.t.cols.Generation),
	}
	if u != nil {
		read := &driver.UnlessRead{Query: cb.unlessRead(*u, "1 AS rowlease_found, ")}
		for _, col := range u.Columns {
			read.Columns = append(read.Columns, cb.col(col))
		}
		p.Unless = read
	}
	return ab.drv.AcquireCreate(p)
}

// paramPrefix renames every parameter of a template: {key} becomes
// {<prefix>key}. (No identifier holds a brace: they are validated.)
func paramPrefix(prefix, tmpl string) string { return strings.ReplaceAll(tmpl, "{", "{"+prefix) }
