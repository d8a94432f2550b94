package engine

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/rowlease/rowlease/internal/driver"
)

// PrepareMode says whether a Lease keeps prepared statements.
type PrepareMode int

const (
	// PrepareAuto prepares statements on SQLite, where parsing a statement
	// costs as much as running it, and sends text on MySQL and PostgreSQL.
	// On MySQL a prepared statement lives on the server, once per
	// connection it runs on, and counts against max_prepared_stmt_count
	// (16382 by default), one limit for every client of the server: the
	// request flow keeps about 6 per connection (measured on MariaDB 10.11:
	// 40 connections, 224 statements), so 40-connection pods exhaust the
	// default at about 70 pods, and other applications' prepares then fail
	// (error 1461). With interpolateParams=true text is one round trip as
	// well; preparing saved about 25µs per statement on a loopback
	// connection. pgx keeps its own statement cache on PostgreSQL.
	PrepareAuto PrepareMode = iota
	// PrepareNever sends every statement as text: for go-sqlmock, or a
	// proxy that does not support prepared statements.
	PrepareNever
	// PrepareAlways prepares on every dialect: on MySQL, when the server's
	// max_prepared_stmt_count has room for the Leases' statements times
	// the connections of every pool that uses them.
	PrepareAlways
)

// maxPrepared bounds the statements one Lease keeps, over all pools; statements
// beyond it are sent as text.
const maxPrepared = 128

// pool is what a connection pool has and a transaction or a single
// connection has not: prepared statements are kept only for pools
// (*sql.DB, *sqlx.DB), where a *sql.Stmt is valid on every connection.
type pool interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
	Stats() sql.DBStats
}

type stmtKey struct {
	db    pool
	query string
}

// cachedStmt is a kept statement and the operations using it right now.
type cachedStmt struct {
	s       *sql.Stmt
	users   int
	dropped bool // Close took it out of the cache; its last user closes it
}

// stmtCache keeps prepared statements per pool and query.
type stmtCache struct {
	mu     sync.Mutex
	m      map[stmtKey]*cachedStmt
	closed bool // Close was called: nothing more is prepared
}

// Prepares reports whether m keeps statements prepared on a pool in
// dialect d: PrepareAlways does, PrepareNever does not, PrepareAuto does
// where the driver prepares by default (Caps.PrepareByDefault: SQLite
// only). Code that keeps statements of its own beside a Lease's
// (request.Runner does) follows the same rule with it.
func Prepares(m PrepareMode, d Dialect) bool { return prepares(m, d.driver().Caps()) }

func prepares(m PrepareMode, c driver.Caps) bool {
	switch m {
	case PrepareNever:
		return false
	case PrepareAlways:
		return true
	}
	return c.PrepareByDefault
}

func (l *Lease[K]) prepares() bool { return prepares(l.prepare, l.caps) }

func noop() {}

// stmt returns a prepared statement for q on db and the function to call
// when the caller is done with it, or nil when db is not a pool, preparing
// is off, the Lease is closed, the cache is full, or preparing failed (the
// caller then sends the text, and reports that statement's own error). A
// statement handed out is not closed before its done function is called,
// even by a concurrent Close.
func (l *Lease[K]) stmt(ctx context.Context, db DB, q string) (*sql.Stmt, func()) {
	if !l.prepares() {
		return nil, noop
	}
	if t, ok := db.(pooledTx); ok {
		// The pool's statement, bound to the transaction's connection:
		// database/sql prepares it there once and keeps it for the next
		// transaction on that connection; the bound copy is closed with
		// the transaction.
		s, done := l.poolStmt(ctx, t.pool.(pool), q, true)
		if s == nil {
			return nil, done
		}
		return t.tx.StmtContext(ctx, s), done
	}
	p, ok := db.(pool)
	if !ok {
		return nil, noop
	}
	return l.poolStmt(ctx, p, q, false)
}

// prepareInTxWait bounds the wait of preparing a pool's statement from
// inside one of its transactions (InTx), in the race where the pool's
// last free connection was taken after poolStmt saw it free.
const prepareInTxWait = 20 * time.Millisecond

// poolStmt is stmt on pool p. inTx says the caller holds one of p's
// connections in a transaction: then a statement not kept yet is prepared
// only if p has a connection free now (else the caller sends the text, as
// before: waiting for a connection while holding one could wait for
// ever, on a pool of one connection, say), and within prepareInTxWait.
func (l *Lease[K]) poolStmt(ctx context.Context, p pool, q string, inTx bool) (*sql.Stmt, func()) {
	k := stmtKey{db: p, query: q}
	c := &l.stmts
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, noop
	}
	if e, ok := c.m[k]; ok {
		e.users++
		c.mu.Unlock()
		return e.s, func() { c.done(e) }
	}
	full := len(c.m) >= maxPrepared
	c.mu.Unlock()
	if full {
		return nil, noop
	}
	pctx := ctx
	if inTx {
		st := p.Stats()
		if st.MaxOpenConnections > 0 && st.Idle == 0 && st.OpenConnections >= st.MaxOpenConnections {
			return nil, noop
		}
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, prepareInTxWait)
		defer cancel()
	}
	s, err := p.PrepareContext(pctx, q)
	if err != nil {
		return nil, noop
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = s.Close()
		return nil, noop
	}
	e, ok := c.m[k]
	if ok {
		e.users++
		c.mu.Unlock()
		_ = s.Close() // another goroutine prepared it first
		return e.s, func() { c.done(e) }
	}
	if c.m == nil {
		c.m = map[stmtKey]*cachedStmt{}
	}
	e = &cachedStmt{s: s, users: 1}
	c.m[k] = e
	c.mu.Unlock()
	return s, func() { c.done(e) }
}

// done ends one use of e, and closes it if Close dropped it meanwhile.
func (c *stmtCache) done(e *cachedStmt) {
	c.mu.Lock()
	e.users--
	last := e.dropped && e.users == 0
	c.mu.Unlock()
	if last {
		_ = e.s.Close()
	}
}

// Close closes the prepared statements the Lease keeps and drops its
// references to their pools; from then on the Lease sends every statement
// as text (it stays usable, and prepares nothing more). An operation
// running at the same time finishes on its statement, which is closed when
// it is done. Close is safe to call concurrently with operations and more
// than once. Close a Lease (or the session.Locker, request.Runner or
// toolexec.Store that owns it) before the pools it was used with: until
// then it keeps their statements (at most 128 per Lease in all) reachable
// and, on MySQL with PrepareAlways, open on the server.
func (l *Lease[K]) Close() error {
	c := &l.stmts
	c.mu.Lock()
	c.closed = true
	var idle []*sql.Stmt
	for k, e := range c.m {
		delete(c.m, k)
		if e.users == 0 {
			idle = append(idle, e.s)
		} else {
			e.dropped = true
		}
	}
	c.mu.Unlock()
	var first error
	for _, s := range idle {
		if err := s.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (l *Lease[K]) queryRow(ctx context.Context, db DB, q string, args []any) *sql.Row {
	db = resolve(db)
	s, done := l.stmt(ctx, db, q)
	defer done()
	if s != nil {
		// The Row holds its result; database/sql keeps the statement open
		// until the Row is scanned, even if it is closed meanwhile.
		return s.QueryRowContext(ctx, args...)
	}
	return db.QueryRowContext(ctx, q, args...)
}

func (l *Lease[K]) execQ(ctx context.Context, db DB, q string, args []any) (sql.Result, error) {
	db = resolve(db)
	s, done := l.stmt(ctx, db, q)
	defer done()
	if s != nil {
		return s.ExecContext(ctx, args...)
	}
	return db.ExecContext(ctx, q, args...)
}
