package lease

import (
	"context"
	"database/sql"
	"sync"
)

// PrepareMode says whether a Lease keeps prepared statements.
type PrepareMode int

const (
	// PrepareAuto prepares statements on SQLite and MySQL, where parsing a
	// statement costs as much as running it, and not on PostgreSQL, where
	// pgx keeps its own statement cache.
	PrepareAuto PrepareMode = iota
	// PrepareNever sends every statement as text: for go-sqlmock, or a
	// proxy that does not support prepared statements.
	PrepareNever
	// PrepareAlways prepares on every dialect.
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

// stmtCache keeps prepared statements per pool and query.
type stmtCache struct {
	mu sync.Mutex
	m  map[stmtKey]*sql.Stmt
}

func (l *Lease[K]) prepares() bool {
	switch l.prepare {
	case PrepareNever:
		return false
	case PrepareAlways:
		return true
	}
	return l.dialect != Postgres
}

// stmt returns a prepared statement for q on db, or nil when db is not a
// pool, preparing is off, the cache is full, or preparing failed (the
// caller then sends the text, and reports that statement's own error).
func (l *Lease[K]) stmt(ctx context.Context, db DB, q string) *sql.Stmt {
	if !l.prepares() {
		return nil
	}
	p, ok := db.(pool)
	if !ok {
		return nil
	}
	k := stmtKey{db: p, query: q}
	l.stmts.mu.Lock()
	s, ok := l.stmts.m[k]
	full := len(l.stmts.m) >= maxPrepared
	l.stmts.mu.Unlock()
	if ok {
		return s
	}
	if full {
		return nil
	}
	s, err := p.PrepareContext(ctx, q)
	if err != nil {
		return nil
	}
	l.stmts.mu.Lock()
	defer l.stmts.mu.Unlock()
	if old, ok := l.stmts.m[k]; ok {
		_ = s.Close()
		return old
	}
	if l.stmts.m == nil {
		l.stmts.m = map[stmtKey]*sql.Stmt{}
	}
	l.stmts.m[k] = s
	return s
}

// Close closes the prepared statements the Lease keeps and drops its
// references to their pools. The Lease stays usable (it prepares again on
// demand). A Lease that outlives the pools it was used with should be
// closed when they are, or it keeps their statements (at most 128 per
// Lease in all) reachable.
func (l *Lease[K]) Close() error {
	l.stmts.mu.Lock()
	defer l.stmts.mu.Unlock()
	var first error
	for k, s := range l.stmts.m {
		if err := s.Close(); err != nil && first == nil {
			first = err
		}
		delete(l.stmts.m, k)
	}
	return first
}

func (l *Lease[K]) queryRow(ctx context.Context, db DB, q string, args []any) *sql.Row {
	db = resolve(db)
	if s := l.stmt(ctx, db, q); s != nil {
		return s.QueryRowContext(ctx, args...)
	}
	return db.QueryRowContext(ctx, q, args...)
}

func (l *Lease[K]) execQ(ctx context.Context, db DB, q string, args []any) (sql.Result, error) {
	db = resolve(db)
	if s := l.stmt(ctx, db, q); s != nil {
		return s.ExecContext(ctx, args...)
	}
	return db.ExecContext(ctx, q, args...)
}
