package engine

import (
	"context"
	"database/sql"
	"strings"
	"time"
)

// MaxBatch is the most grants RenewMany sends in one statement; a longer
// list goes in several. It keeps a statement's parameters (four per grant
// on MySQL and SQLite, three on PostgreSQL) well inside every dialect's
// limit.
const MaxBatch = 1000

// RenewMany renews every grant in gs for ttl, with one statement per
// MaxBatch grants instead of one each:
//
//	UPDATE t SET expires_at = …, updated_at = … WHERE key IN (…) AND (key, token, generation) IN (…) [RETURNING token, generation]
//
// The renewal is Renew's (never backwards, always changing the row), and
// each renewed grant's trust deadline is computed from the send time of
// the first statement that carried it. PostgreSQL and SQLite hand the
// matched rows back with RETURNING. On MySQL, where an UPDATE returns only
// a count, a renewal is proved by that count: only when fewer rows changed
// than were sent does a read follow, to say which grants still hold (the
// others are lost), and one statement more renews those again, its count
// their proof. A token still there is never taken for a renewal, except
// on a declared coarse column (Options.ExpiryResolution), where a renewal
// can leave its row unchanged, after a statement that saw every committed
// write. With Options.MultiPrimary that read is sent under
// wsrep_sync_wait, and the statement after it on the same connection (see
// renewChunkMySQL). (On a MySQL pool each UPDATE runs in a READ COMMITTED
// transaction of its own, so that it never waits for row locks on rows it
// does not renew: BEGIN and COMMIT are two more round trips per
// statement.)
//
// It returns, in the order of gs, the grants (renewed, or as given) and an
// error for each: nil; a *LostError when the token no longer matches; a
// *ValidationError for a bad grant or TTL, before any SQL is sent for it;
// or the driver's error of the statement that carried it, which every
// grant of that statement shares (a transient error: retry, as for
// Renew). A grant holds when its token and its generation match, as for
// Confirm: a token granted again (a reentry that found the row free, with
// the generation one higher) does not make a copy of the earlier grant
// hold. The same key may appear more than once (an old holder's grant and
// a new one's, say): grants are matched by token and generation. The same
// grant given more than once is sent once, and every copy gets the first
// copy's answer.
//
// The statement spans many keys: on a sharded engine (Vitess) it would go
// to every shard; renew one key per statement there (Renew).
//
// Pass a pool, or a transaction of your own: the statements lock every
// row they renew until they end, so on a pool they run in autocommit. On
// SQLite a FlowDB whose flow has a transaction open routes into it (see
// FlowDB); to renew many flows' leases at once, pass their pool and renew
// the leases of a flow with a transaction open through its FlowDB instead.
func RenewMany[K Key](ctx context.Context, l *Lease[K], db DB, gs []Grant[K], ttl time.Duration) ([]Grant[K], []error) {
	out := append([]Grant[K](nil), gs...)
	errs := make([]error, len(gs))
	if err := l.checkDB(db); err != nil {
		fill(errs, err)
		return out, errs
	}
	if err := l.checkTTL(ttl); err != nil {
		fill(errs, err)
		return out, errs
	}
	if err := l.probe(ctx, db, false); err != nil {
		fill(errs, err)
		return out, errs
	}
	var todo []int
	first := make(map[grantID[K]]int, len(gs))
	copyOf := make(map[int]int) // a repeated grant's index -> its first copy's
	for i, g := range gs {
		if err := l.checkGrant(g); err != nil {
			errs[i] = err
			continue
		}
		id := grantID[K]{g.Key, g.Token.secret(), g.Generation}
		if j, ok := first[id]; ok {
			copyOf[i] = j
			continue
		}
		first[id] = i
		todo = append(todo, i)
	}
	for len(todo) > 0 {
		n := min(len(todo), MaxBatch)
		l.renewChunk(ctx, db, out, errs, todo[:n], ttl)
		todo = todo[n:]
	}
	for i, j := range copyOf {
		out[i], errs[i] = out[j], errs[j]
	}
	return out, errs
}

// grantID identifies a grant: one row, one token, one generation. Copies
// of a grant in one RenewMany are renewed once: the row would match once
// however often its pair were sent.
type grantID[K Key] struct {
	key K
	tok string
	gen int64
}

func fill(errs []error, err error) {
	for i := range errs {
		errs[i] = err
	}
}

// renewChunk renews the grants out[i] for i in idx with one statement (on
// MySQL, when fewer rows changed than were sent, a read and a statement
// more; see renewChunkMySQL).
func (l *Lease[K]) renewChunk(ctx context.Context, db DB, out []Grant[K], errs []error, idx []int, ttl time.Duration) {
	if l.obs != nil {
		start := time.Now()
		defer func() {
			for _, i := range idx {
				gen := out[i].Generation
				err := errs[i]
				l.observe(ctx, "renew", VerdictOK, start, &gen, &err)
			}
		}()
	}
	q, args := l.b.renewMany(grantList[K](out), idx, ttl)
	db, done, err := l.pin(ctx, db)
	if err != nil {
		for _, i := range idx {
			errs[i] = err
		}
		return
	}
	defer done()
	// The send time of the first statement: no later than that of any
	// statement that renewed a grant of the chunk.
	sent := l.clock.Now()
	var renewed map[int]bool
	if !l.caps.Returning {
		renewed = make(map[int]bool, len(idx))
		err = l.renewChunkMySQL(ctx, db, q, args, out, idx, ttl, renewed)
	} else {
		renewed, err = l.heldAmong(ctx, db, db, q, args, out, idx)
	}
	for _, i := range idx {
		switch {
		case err != nil:
			errs[i] = err
		case renewed[i]:
			out[i].TTL, out[i].Deadline = ttl, l.deadline(sent, ttl)
		default:
			errs[i] = &LostError{Key: keyText(out[i].Key), Op: "renew"}
		}
	}
}

// renewChunkMySQL renews the grants out[i], i in idx, on MySQL, where an
// UPDATE reports only how many rows it changed. On a column that keeps
// microseconds every renewal changes its row, so that count is the proof:
// when every row sent changed, every grant was renewed. When fewer did, a
// read says which grants still hold (the others are lost), and those are
// sent again, until a statement changed every row it was sent (a grant
// lost between the read and that statement is found by the next read). A
// grant is never reported renewed because its token is still there: a
// statement may have missed a row that it did not renew (a node that had
// not yet applied the holder's own write). Only on a declared coarse
// column (Options.ExpiryResolution), where a renewal in the same tick
// leaves its row unchanged, does "still held after a causal statement"
// stand for "renewed by it", as Renew's insert-id fallback does.
//
// With Options.MultiPrimary on a pool, the first statement is not causal.
// The read and the statements after it then run on one connection, and
// the read is sent under wsrep_sync_wait: its node first applies every
// write the cluster committed before it, and the statements that follow
// on that node see them. The wait must come before each statement's READ
// COMMITTED transaction (see rowsAffected): MariaDB skips wsrep_sync_wait
// inside an active multi-statement transaction, so a SET STATEMENT
// wsrep_sync_wait on the UPDATE inside it, or a SET SESSION, would not
// wait. Inside a transaction of the caller's, whose statements cannot
// wait, the transaction is as causal as the caller made it (start it with
// a SyncWait read).
func (l *Lease[K]) renewChunkMySQL(ctx context.Context, db DB, q string, args []any, out []Grant[K], idx []int, ttl time.Duration, renewed map[int]bool) error {
	n, err := l.rowsAffected(ctx, db, db, q, args)
	if err != nil {
		return err
	}
	pending := idx
	on := db // where the statements after the first run
	// synced: the last statement saw every write committed before it.
	synced := !l.multiPrimary || !autocommit(db)
	for n != int64(len(pending)) {
		if !synced && on == db {
			if pc, ok := resolve(db).(pooledConn); ok {
				on = pc.conn // one connection already (OnConn, pin): it catches up there
			} else if cp, ok := resolve(db).(connPool); ok {
				c, err := cp.Conn(ctx)
				if err != nil {
					return err
				}
				defer c.Close()
				on = c
			} else {
				on = autocommitOnly{db} // the wait applies outside a transaction
			}
		}
		still, err := l.stillHeld(ctx, db, on, out, pending)
		if err != nil {
			return err
		}
		if synced && l.coarse {
			pending = still
			break
		}
		if len(still) == 0 || (synced && len(still) == len(pending)) {
			// All lost; or every row held and yet some causal renewal
			// changed nothing, which only a column coarser than declared
			// does: unproven, so lost, as Renew reports it.
			return nil
		}
		pending = still
		q, args = l.b.renewMany(grantList[K](out), pending, ttl)
		if _, ok := on.(autocommitOnly); ok {
			q = l.drv.Causal(q)
		}
		if n, err = l.rowsAffected(ctx, db, on, q, args); err != nil {
			return err
		}
		synced = true
	}
	for _, i := range pending {
		renewed[i] = true
	}
	return nil
}

// connPool is a pool that hands out one of its connections (*sql.DB,
// *sqlx.DB).
type connPool interface {
	Conn(ctx context.Context) (*sql.Conn, error)
}

// autocommitOnly runs its statements on db in autocommit: rowsAffected
// then opens no transaction, so a wsrep_sync_wait on the statement waits.
// It is the causal path on a pool that cannot lend one connection.
type autocommitOnly struct{ DB }

// stillHeld reads which of the grants out[i], i in idx, still hold their
// rows (token and generation), on on, causally on a multi-primary cluster,
// and returns their indices in the order of idx.
func (l *Lease[K]) stillHeld(ctx context.Context, db, on DB, out []Grant[K], idx []int) ([]int, error) {
	rq, rargs := l.b.heldTokens(grantList[K](out), idx)
	if l.multiPrimary {
		rq = l.drv.Causal(rq)
	}
	found, err := l.heldAmong(ctx, db, on, rq, rargs, out, idx)
	if err != nil {
		return nil, err
	}
	var still []int
	for _, i := range idx {
		if found[i] {
			still = append(still, i)
		}
	}
	return still, nil
}

// heldIndex maps the token and generation of each grant out[i], i in idx,
// to i.
func heldIndex[K Key](out []Grant[K], idx []int) map[held]int {
	m := make(map[held]int, len(idx))
	for _, i := range idx {
		m[held{out[i].Token.secret(), out[i].Generation}] = i
	}
	return m
}

// heldAmong runs q on on, sent again as a deadlock or certification
// victim when db is a pool (see retry), and reports which of the grants
// out[i], i in idx, are among the (token, generation) rows it returns: the
// RETURNING of a batch renewal, or the read of stillHeld.
func (l *Lease[K]) heldAmong(ctx context.Context, db, on DB, q string, args []any, out []Grant[K], idx []int) (map[int]bool, error) {
	byGrant := heldIndex(out, idx)
	found := make(map[int]bool, len(idx))
	err := l.retry(ctx, db, func() error {
		clear(found)
		rows, err := resolve(on).QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var h held
			if err := rows.Scan(&h.tok, &h.gen); err != nil {
				return err
			}
			h.tok = strings.TrimRight(h.tok, " ") // a CHAR column pads on PostgreSQL
			if i, ok := byGrant[h]; ok {
				found[i] = true
			}
		}
		return rows.Err()
	})
	return found, err
}

// rowsAffected runs the batch UPDATE q on on, and sends it again as a
// deadlock or certification victim when db is a pool. On a pool or a
// connection of the library's own it runs in a READ COMMITTED
// transaction of its own: InnoDB then passes, without waiting, rows
// locked by other transactions that do not match (semi-consistent read),
// where a full scan — the optimizer's choice when the keys cover much of
// a small table — would otherwise wait for every locked row of the
// table, such as a request row another flow has just inserted.
func (l *Lease[K]) rowsAffected(ctx context.Context, db, on DB, q string, args []any) (int64, error) {
	var n int64
	err := l.retry(ctx, db, func() error {
		var res sql.Result
		var err error
		if b, ok := resolve(on).(TxBeginner); ok {
			var tx *sql.Tx
			if tx, err = b.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}); err != nil {
				return err
			}
			if res, err = tx.ExecContext(ctx, q, args...); err != nil {
				_ = tx.Rollback()
				return err
			}
			if err = tx.Commit(); err != nil {
				return err
			}
		} else if res, err = resolve(on).ExecContext(ctx, q, args...); err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// held is a token and generation that the database reports holding.
type held struct {
	tok string
	gen int64
}
