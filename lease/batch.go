package lease

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"time"
)

// MaxBatch is the most grants RenewMany sends in one statement; a longer
// list goes in several. It keeps a statement's parameters (three per grant
// on MySQL and SQLite, two on PostgreSQL) well inside every dialect's
// limit.
const MaxBatch = 1000

// RenewMany renews every grant in gs for ttl, with one statement per
// MaxBatch grants instead of one each:
//
//	UPDATE t SET expires_at = …, updated_at = … WHERE key IN (…) AND (key, token) IN (…) [RETURNING token]
//
// The renewal is Renew's (never backwards, always changing the row), and
// each renewed grant's trust deadline is computed from the send time of
// the statement that carried it. PostgreSQL and SQLite hand the matched
// rows back with RETURNING; on MySQL, where an UPDATE returns only a count,
// one read follows, and only when fewer rows matched than were sent. (On a
// MySQL pool the UPDATE runs in a READ COMMITTED transaction of its own,
// so that it never waits for row locks on rows it does not renew: BEGIN
// and COMMIT are two more round trips per statement.)
//
// It returns, in the order of gs, the grants (renewed, or as given) and an
// error for each: nil; a *LostError when the token no longer matches; a
// *ValidationError for a bad grant or TTL, before any SQL is sent for it;
// or the driver's error of the statement that carried it, which every
// grant of that statement shares (a transient error: retry, as for
// Renew). The same key may appear more than once (an old holder's grant
// and a new one's, say): grants are matched by their tokens.
//
// The statement spans many keys: on a sharded engine (Vitess) it would go
// to every shard; renew one key per statement there (Renew).
//
// Pass a pool, or a transaction of your own: the statements lock every
// row they renew until they end, so on a pool they run in autocommit. On
// SQLite a FlowDB whose flow has a transaction open routes into it (see
// FlowDB); to renew many flows' leases at once, pass their pool and renew
// the leases of a flow with a transaction open through its FlowDB instead.
func (l *Lease[K]) RenewMany(ctx context.Context, db DB, gs []Grant[K], ttl time.Duration) ([]Grant[K], []error) {
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
	var todo []int
	for i, g := range gs {
		if err := l.checkGrant(g); err != nil {
			errs[i] = err
			continue
		}
		todo = append(todo, i)
	}
	for len(todo) > 0 {
		n := min(len(todo), MaxBatch)
		l.renewChunk(ctx, db, out, errs, todo[:n], ttl)
		todo = todo[n:]
	}
	return out, errs
}

func fill(errs []error, err error) {
	for i := range errs {
		errs[i] = err
	}
}

// renewChunk renews the grants out[i] for i in idx with one statement (and
// on MySQL, when fewer rows matched than were sent, one read).
func (l *Lease[K]) renewChunk(ctx context.Context, db DB, out []Grant[K], errs []error, idx []int, ttl time.Duration) {
	if l.obs != nil {
		start := time.Now()
		defer func() {
			for _, i := range idx {
				gen := out[i].Generation
				err := errs[i]
				l.observe(ctx, "renew", OutcomeOK, start, &gen, &err)
			}
		}()
	}
	q, args := l.b.renewMany(grantList[K](out), idx, ttl)
	byToken := make(map[string]int, len(idx))
	for _, i := range idx {
		byToken[out[i].Token.Secret()] = i
	}
	renewed := make(map[int]bool, len(idx))
	sent := l.clock.Now()
	var err error
	if l.dialect == MySQL {
		err = l.renewChunkMySQL(ctx, db, q, args, out, idx, byToken, renewed)
	} else {
		err = l.retry(ctx, db, func() error {
			clear(renewed)
			rows, err := resolve(db).QueryContext(ctx, q, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var tok string
				if err := rows.Scan(&tok); err != nil {
					return err
				}
				if i, ok := byToken[strings.TrimRight(tok, " ")]; ok {
					renewed[i] = true
				}
			}
			return rows.Err()
		})
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

// renewChunkMySQL runs the batch UPDATE; all matched when every row sent
// changed (every renewal changes its row). Otherwise it reads which tokens
// still hold: those matched (a declared coarse column can leave a renewed
// row unchanged); the others are lost. On a multi-primary cluster the
// UPDATE is first run again, causally (see Options.MultiPrimary), so a
// node that had not yet applied the holder's own writes cannot make a
// grant look lost.
func (l *Lease[K]) renewChunkMySQL(ctx context.Context, db DB, q string, args []any, out []Grant[K], idx []int, byToken map[string]int, renewed map[int]bool) error {
	all := func() {
		for _, i := range idx {
			renewed[i] = true
		}
	}
	n, err := l.rowsAffected(ctx, db, q, args)
	if err != nil {
		return err
	}
	if n == int64(len(idx)) {
		all()
		return nil
	}
	if l.multiPrimary && autocommit(db) {
		if n, err = l.rowsAffected(ctx, db, causal(q), args); err != nil {
			return err
		}
		if n == int64(len(idx)) {
			all()
			return nil
		}
	}
	rq, rargs := l.b.heldTokens(grantList[K](out), idx)
	if l.multiPrimary {
		rq = causal(rq)
	}
	return l.retry(ctx, db, func() error {
		clear(renewed)
		rows, err := resolve(db).QueryContext(ctx, rq, rargs...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var tok string
			if err := rows.Scan(&tok); err != nil {
				return err
			}
			if i, ok := byToken[tok]; ok {
				renewed[i] = true
			}
		}
		return rows.Err()
	})
}

// rowsAffected runs the batch UPDATE q. On a pool it runs in a READ
// COMMITTED transaction of its own: InnoDB then passes, without waiting,
// rows locked by other transactions that do not match (semi-consistent
// read), where a full scan — the optimizer's choice when the keys cover
// much of a small table — would otherwise wait for every locked row of
// the table, such as a request row another flow has just inserted.
func (l *Lease[K]) rowsAffected(ctx context.Context, db DB, q string, args []any) (int64, error) {
	var n int64
	err := l.retry(ctx, db, func() error {
		var res sql.Result
		var err error
		if b, ok := resolve(db).(TxBeginner); ok {
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
		} else if res, err = resolve(db).ExecContext(ctx, q, args...); err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// pairs writes the key list and the (key, token) list of a batch, and
// their arguments: PostgreSQL numbers its placeholders and names each key
// once; MySQL and SQLite repeat it. SQLite takes a row value IN only from
// a subquery, hence VALUES there.
func (s sqlBuilder) pairs(keys []any, toks []string) (keyList, pairList string, args []any) {
	var kb, pb strings.Builder
	n := len(keys)
	if s.d == Postgres {
		args = make([]any, 0, 2*n)
		for i := range keys {
			k, t := "$"+strconv.Itoa(2*i+1), "$"+strconv.Itoa(2*i+2)
			if i > 0 {
				kb.WriteString(", ")
				pb.WriteString(", ")
			}
			kb.WriteString(k)
			pb.WriteString("(" + k + ", " + t + ")")
			args = append(args, keys[i], toks[i])
		}
		return kb.String(), pb.String(), args
	}
	args = make([]any, 0, 3*n)
	for i := range keys {
		if i > 0 {
			kb.WriteString(", ")
			pb.WriteString(", ")
		}
		kb.WriteByte('?')
		pb.WriteString("(?, ?)")
		args = append(args, keys[i])
	}
	for i := range keys {
		args = append(args, keys[i], toks[i])
	}
	pl := pb.String()
	if s.d == SQLite {
		pl = "VALUES " + pl
	}
	return kb.String(), pl, args
}

func batchArgs[K Key](gs []Grant[K], idx []int) ([]any, []string) {
	keys := make([]any, len(idx))
	toks := make([]string, len(idx))
	for j, i := range idx {
		keys[j], toks[j] = gs[i].Key, gs[i].Token.Secret()
	}
	return keys, toks
}

// renewMany is the batch renewal of the grants gs[i], i in idx: Renew's
// expiry rule with the token already matched by the WHERE clause.
func (s sqlBuilder) renewMany(gs any, idx []int, ttl time.Duration) (string, []any) {
	keys, toks := anyBatchArgs(gs, idx)
	c := s.t.cols
	e, k, tok := s.col(c.ExpiresAt), s.col(c.Key), s.col(c.Token)
	ttlText := strconv.FormatInt(ttl.Microseconds(), 10)
	target := s.d.plusMicros(s.d.now(), ttlText)
	assigns := []string{e + " = CASE WHEN " + e + " IS NOT NULL AND " + e + " >= " + target +
		" THEN " + s.d.plusMicros(e, "1") + " ELSE " + target + " END"}
	assigns = append(assigns, s.tail(false, nil)...)
	keyList, pairList, args := s.pairs(keys, toks)
	q := "UPDATE " + s.t.qname(s.d) + " SET " + strings.Join(assigns, ", ") +
		" WHERE " + k + " IN (" + keyList + ") AND (" + k + ", " + tok + ") IN (" + pairList + ")"
	if s.d != MySQL {
		q += " RETURNING " + tok
	}
	return q, args
}

// heldTokens reads which of the batch's tokens still hold their rows.
func (s sqlBuilder) heldTokens(gs any, idx []int) (string, []any) {
	keys, toks := anyBatchArgs(gs, idx)
	c := s.t.cols
	k, tok := s.col(c.Key), s.col(c.Token)
	keyList, pairList, args := s.pairs(keys, toks)
	return "SELECT " + tok + " FROM " + s.t.qname(s.d) + " WHERE " + k + " IN (" + keyList + ") AND (" +
		k + ", " + tok + ") IN (" + pairList + ")", args
}

// anyBatchArgs is batchArgs for the builder, which is not generic.
func anyBatchArgs(gs any, idx []int) ([]any, []string) {
	return gs.(interface{ batchArgs([]int) ([]any, []string) }).batchArgs(idx)
}

// grantList lets the builder read keys and tokens of any key type.
type grantList[K Key] []Grant[K]

func (g grantList[K]) batchArgs(idx []int) ([]any, []string) { return batchArgs([]Grant[K](g), idx) }

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
