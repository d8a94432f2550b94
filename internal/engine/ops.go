package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Acquire takes the lease on key for holder with a new random token. It wins
// when the row is free, or its lease has expired by the database clock. On
// an existing row it is one statement. On failure it reads the row once to
// say why: *ConflictError (ErrHeld), ErrNotFound, or *StateError.
func (l *Lease[K]) Acquire(ctx context.Context, db DB, key K, holder string, ttl time.Duration) (Grant[K], error) {
	return l.AcquireWith(ctx, db, key, holder, ttl, AcquireOptions{})
}

// AcquireWith is Acquire with options: reentry with a held token, a state
// condition, and columns set in the same statement.
//
// When the statement was sent and failed (a driver error: the outcome may
// be unknown, the connection dropped or ctx cancelled with the statement
// on the wire), the grant it tried — key, holder, token and TTL, its
// generation 0, since none came back — is returned with the error, so
// that a caller on a pool (autocommit) can give back what it may have
// taken: read the row's generation, and Release if the holder is its own.
// A refusal (ErrHeld, ErrNotFound, ErrState, ErrExists) and bad input
// return the zero Grant.
func (l *Lease[K]) AcquireWith(ctx context.Context, db DB, key K, holder string, ttl time.Duration, o AcquireOptions) (out Grant[K], rerr error) {
	if l.obs != nil {
		defer l.observe(ctx, "acquire", VerdictAcquired, time.Now(), &out.Generation, &rerr)
	}
	if err := l.checkNew(db, key, holder, ttl); err != nil {
		return Grant[K]{}, err
	}
	if err := l.checkIn("states", o.InStates); err != nil {
		return Grant[K]{}, err
	}
	if err := l.checkWrites(o.SetState, o.Set); err != nil {
		return Grant[K]{}, err
	}
	if err := l.probe(ctx, db, false); err != nil {
		return Grant[K]{}, err
	}
	tok, fresh := o.Token, o.Token.isZero()
	if fresh {
		var err error
		if tok, err = NewToken(); err != nil {
			return Grant[K]{}, err
		}
	}
	c := l.acquireQ
	if !fresh || len(o.InStates) > 0 || o.SetState != "" || len(o.Set) > 0 {
		c = l.shapedStmt(o.acquireShape("acquire"), len(o.InStates), o.SetState != "", false, o.Set, func() string {
			return l.b.acquire(o.InStates, o.SetState != "", o.Set, fresh)
		})
	}
	a := leaseArgs{key: key, tok: tok.secret(), holder: holder, ttl: ttl.Microseconds(), state: o.SetState}
	if len(o.InStates) > 0 || len(o.Set) > 0 {
		a.more = make(map[string]any, len(o.InStates)+len(o.Set))
		addStates(a.more, o.InStates)
		addSet(a.more, o.Set)
	}
	args := c.argsOf(&a)
	db, done, err := l.pin(ctx, db)
	if err != nil {
		return Grant[K]{}, l.translate(key, err)
	}
	defer done()
	sent := l.clock.Now()
	gen, ok, err := l.exec(ctx, db, c, args, false)
	if err != nil {
		err = l.translate(key, err)
		if errors.Is(err, ErrExists) {
			return Grant[K]{}, err // a unique key refused a value of o.Set: nothing written
		}
		// The outcome may be unknown: the grant it tried, without the
		// generation it did not get back (see the doc).
		return Grant[K]{Key: key, Holder: holder, Token: tok, TTL: ttl}, err
	}
	if !ok {
		return Grant[K]{}, l.whyNot(ctx, db, key, o.InStates)
	}
	return Grant[K]{Key: key, Holder: holder, Token: tok, Generation: gen, TTL: ttl,
		Deadline: l.deadline(sent, ttl)}, nil
}

// whyNot classifies a failed acquire with one read.
func (l *Lease[K]) whyNot(ctx context.Context, db DB, key K, want []string) error {
	st, err := l.Inspect(ctx, db, key)
	if err != nil {
		return err
	}
	if len(want) > 0 {
		okState := false
		for _, w := range want {
			okState = okState || w == st.State
		}
		if !okState {
			return &StateError{Key: keyText(key), State: st.State, Want: want}
		}
	}
	if st.Held {
		return &ConflictError{Key: keyText(key), Holder: st.Holder, Generation: st.Generation, Remaining: st.Remaining}
	}
	// Free now but not a moment ago: another holder released in between.
	return &ConflictError{Key: keyText(key), Holder: st.Holder, Generation: st.Generation}
}

// Renew extends a held lease to now + ttl by the database clock (never
// backwards) and returns the grant with its new trust deadline. One
// statement. A grant whose token or generation no longer matches gives
// *LostError (ErrLost). A lease past its expiry that nobody has taken over
// can still be renewed.
func (l *Lease[K]) Renew(ctx context.Context, db DB, g Grant[K], ttl time.Duration) (out Grant[K], rerr error) {
	if l.obs != nil {
		defer l.observe(ctx, "renew", VerdictOK, time.Now(), &out.Generation, &rerr)
	}
	if err := l.checkHeld(db, g); err != nil {
		return g, err
	}
	if err := l.checkTTL(ttl); err != nil {
		return g, err
	}
	if err := l.probe(ctx, db, false); err != nil {
		return g, err
	}
	db, done, err := l.pin(ctx, db)
	if err != nil {
		return g, err
	}
	defer done()
	sent := l.clock.Now()
	args := l.renewQ.argsOf(&leaseArgs{key: g.Key, tok: g.Token.secret(), gen: g.Generation, ttl: ttl.Microseconds()})
	gen, ok, err := l.exec(ctx, db, l.renewQ, args, true)
	if err != nil {
		return g, err
	}
	if !ok {
		return g, &LostError{Key: keyText(g.Key), Op: "renew"}
	}
	g.Generation, g.TTL, g.Deadline = gen, ttl, l.deadline(sent, ttl)
	return g, nil
}

// Release gives the lease up: holder, token and expiry become NULL. One
// statement. A grant whose token or generation no longer matches gives
// *LostError: nothing was changed, and someone else (or a newer grant of
// the same token) may hold the lease.
func (l *Lease[K]) Release(ctx context.Context, db DB, g Grant[K]) (rerr error) {
	if l.obs != nil {
		defer l.observe(ctx, "release", VerdictOK, time.Now(), &g.Generation, &rerr)
	}
	if err := l.checkHeld(db, g); err != nil {
		return err
	}
	if err := l.probe(ctx, db, false); err != nil {
		return err
	}
	args := l.releaseQ.argsOf(&leaseArgs{key: g.Key, tok: g.Token.secret(), gen: g.Generation})
	var ok bool
	var err error
	if !l.caps.Returning {
		_, ok, err = l.exec(ctx, db, l.releaseQ, args, true)
	} else {
		ok, err = l.execOne(ctx, db, l.releaseQ, args)
	}
	if err != nil {
		return err
	}
	if !ok {
		return &LostError{Key: keyText(g.Key), Op: "release"}
	}
	return nil
}

// Transition changes a held row in one token-checked (and, with From,
// state-checked) statement: it sets the state and extra columns, and either
// releases the lease or, with Keep, renews it for TTL. It returns the
// updated grant (with a new deadline when kept). A mismatch of token,
// generation or state gives *LostError.
func (l *Lease[K]) Transition(ctx context.Context, db DB, g Grant[K], o ChangeOptions) (out Grant[K], rerr error) {
	if l.obs != nil {
		defer l.observe(ctx, "transition", VerdictOK, time.Now(), &out.Generation, &rerr)
	}
	if err := l.checkChange(db, g, o); err != nil {
		return g, err
	}
	if err := l.probe(ctx, db, false); err != nil {
		return g, err
	}
	c := l.shapedStmt("change", len(o.From), o.To != "", o.Keep, o.Set, func() string {
		return l.b.change(o.From, o.To != "", o.Set, o.Keep)
	})
	if o.Keep {
		on, done, err := l.pin(ctx, db)
		if err != nil {
			return g, l.translate(g.Key, err)
		}
		defer done()
		db = on
	}
	sent := l.clock.Now()
	gen, ok, err := l.exec(ctx, db, c, c.args(changeVals(g, o)), true)
	if err != nil {
		return g, l.translate(g.Key, err)
	}
	if !ok {
		return g, &LostError{Key: keyText(g.Key), Op: "transition"}
	}
	g.Generation = gen
	if o.Keep {
		g.TTL, g.Deadline = o.TTL, l.deadline(sent, o.TTL)
	} else {
		g.Deadline = sent // released: no longer trusted
	}
	return g, nil
}

// Verify checks in one statement that g still holds: the token and the
// generation match and the lease has not expired by the database clock. Inside a transaction on
// MySQL and PostgreSQL it also locks the row (SELECT … FOR UPDATE) until the
// transaction ends, so no one can take the lease over before a side effect
// written in the same transaction commits. (On SQLite the transaction's
// database lock does the same.) It returns the generation, or *LostError.
func Verify[K Key](ctx context.Context, l *Lease[K], db DB, g Grant[K], lock bool) (rgen int64, rerr error) {
	if l.obs != nil {
		defer l.observe(ctx, "verify", VerdictOK, time.Now(), &rgen, &rerr)
	}
	if err := l.checkHeld(db, g); err != nil {
		return 0, err
	}
	if err := l.probe(ctx, db, false); err != nil {
		return 0, err
	}
	c := l.verifyQ
	if lock {
		c = l.verifyLockQ
	}
	var gen int64
	args := c.args(vals("key", g.Key, "tok", g.Token.secret(), "gen", g.Generation))
	miss, err := l.sendConfirmed(ctx, db, c.query, func(q string) (bool, error) {
		err := l.queryRow(ctx, db, q, args).Scan(&gen)
		if errors.Is(err, sql.ErrNoRows) {
			return true, nil
		}
		return false, err
	})
	if miss {
		return 0, &LostError{Key: keyText(g.Key), Op: "check"}
	}
	return gen, err
}

// Inspect reads the row's holder, generation, state and remaining time, all
// judged by the database clock. A missing row gives ErrNotFound.
func (l *Lease[K]) Inspect(ctx context.Context, db DB, key K) (rst Snapshot, rerr error) {
	if l.obs != nil {
		defer l.observe(ctx, "inspect", VerdictOK, time.Now(), &rst.Generation, &rerr)
	}
	if err := l.checkRow(db, key); err != nil {
		return Snapshot{}, err
	}
	if err := l.probe(ctx, db, false); err != nil {
		return Snapshot{}, err
	}
	var st Snapshot
	var held int
	var micros int64
	q := l.inspectQ.query
	if l.multiPrimary {
		q = l.drv.Causal(q) // what the cluster committed, not what this node applied
	}
	err := l.retry(ctx, db, func() error {
		return l.queryRow(ctx, db, q, l.inspectQ.args(vals("key", key))).
			Scan(&st.Holder, &st.Generation, &st.State, &held, &micros)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return Snapshot{}, fmt.Errorf("%w (key %q)", ErrNotFound, keyText(key))
	}
	if err != nil {
		return Snapshot{}, err
	}
	st.Held = held == 1
	if st.Held && micros > 0 {
		st.Remaining = time.Duration(micros) * time.Microsecond
	}
	return st, nil
}

// Create inserts a new row already held by holder, with generation 1, in one
// statement. If the key (or another unique key of the table) exists it
// returns *DuplicateKeyError (ErrExists) and writes nothing. Columns that the
// table requires besides the lease columns go in o.Set.
//
// When the insert was sent and failed with another error than ErrExists,
// the grant it tried is returned with the error: the outcome may be
// unknown (the connection dropped, or ctx was cancelled, with the insert
// on the wire), and a caller on a pool (autocommit) can give back, with
// Delete, a row that the insert may have made; a Delete that finds none
// changes nothing. ErrExists and the errors before any SQL (bad input)
// return the zero Grant.
func (l *Lease[K]) Create(ctx context.Context, db DB, key K, holder string, ttl time.Duration, o CreateOptions) (out Grant[K], rerr error) {
	if l.obs != nil {
		defer l.observe(ctx, "create", VerdictAcquired, time.Now(), &out.Generation, &rerr)
	}
	if err := l.checkNew(db, key, holder, ttl); err != nil {
		return Grant[K]{}, err
	}
	if err := l.checkWrites(o.State, o.Set); err != nil {
		return Grant[K]{}, err
	}
	if err := l.probe(ctx, db, false); err != nil {
		return Grant[K]{}, err
	}
	tok, err := NewToken()
	if err != nil {
		return Grant[K]{}, err
	}
	c := l.createQ
	if o.State != "" || len(o.Set) > 0 {
		c = l.shapedStmt("create", 0, o.State != "", false, o.Set, func() string {
			return l.b.create(o.State != "", o.Set)
		})
	}
	m := heldVals(key, tok, holder, ttl, o.State, nil, o.Set)
	db, done, err := l.pin(ctx, db)
	if err != nil {
		return Grant[K]{}, l.translate(key, err)
	}
	defer done()
	sent := l.clock.Now()
	g := Grant[K]{Key: key, Holder: holder, Token: tok, Generation: 1, TTL: ttl, Deadline: l.deadline(sent, ttl)}
	if err := l.retry(ctx, db, func() error {
		_, err := l.execQ(ctx, db, c.query, c.args(m))
		return err
	}); err != nil {
		err = l.translate(key, err)
		if errors.Is(err, ErrExists) {
			return Grant[K]{}, err
		}
		return g, err // the outcome is unknown: the grant it tried
	}
	return g, nil
}

// Delete removes the row if g still holds it, in one token-checked
// statement: for a row the holder created and gives up before anything
// came of it. A grant whose token or generation no longer matches gives
// *LostError and deletes nothing.
//
// The row's generation goes with it: a later Create of the same key starts
// again at generation 1. Keeping it would need the deleted row to stay (a
// tombstone, which Create would then collide with) or a counter kept
// elsewhere (a second table and a second statement in every Create, on
// tables that may be the user's own). So generations order the grants of
// one row, not of one key across deletions: fence on the generation only
// where keys are not reused — the request and tool-execution rows of this
// module are keyed by fresh UUIDs — and do not Delete a row whose
// generation went out to another system.
func (l *Lease[K]) Delete(ctx context.Context, db DB, g Grant[K]) (rerr error) {
	if l.obs != nil {
		defer l.observe(ctx, "delete", VerdictOK, time.Now(), &g.Generation, &rerr)
	}
	if err := l.checkHeld(db, g); err != nil {
		return err
	}
	if err := l.probe(ctx, db, false); err != nil {
		return err
	}
	ok, err := l.execOne(ctx, db, l.deleteQ, l.deleteQ.args(grantVals(g)))
	if err != nil {
		return err
	}
	if !ok {
		return &LostError{Key: keyText(g.Key), Op: "delete"}
	}
	return nil
}

// Ensure inserts a free row for key (generation 0) unless one exists. It
// is one statement and never fails on an existing row.
func (l *Lease[K]) Ensure(ctx context.Context, db DB, key K, o CreateOptions) (rerr error) {
	if l.obs != nil {
		var none int64
		defer l.observe(ctx, "ensure", VerdictOK, time.Now(), &none, &rerr)
	}
	if err := l.checkRow(db, key); err != nil {
		return err
	}
	if err := l.checkWrites(o.State, o.Set); err != nil {
		return err
	}
	if err := l.probe(ctx, db, false); err != nil {
		return err
	}
	c := l.shapedStmt("ensure", 0, o.State != "", false, o.Set, func() string {
		return l.b.ensure(o.State != "", o.Set)
	})
	m := vals("key", key, "state", o.State)
	addSet(m, o.Set)
	return l.retry(ctx, db, func() error {
		_, err := resolve(db).ExecContext(ctx, c.query, c.args(m)...)
		return err
	})
}
