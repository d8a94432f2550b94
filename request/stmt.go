package request

import (
	"context"
	"database/sql"
	"sync"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
)

// preparer is a database that prepares statements valid on all its
// connections: a pool (*sql.DB, *sqlx.DB), which a *sql.Tx or *sql.Conn
// (they have no Stats) is not.
type preparer interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
	Stats() sql.DBStats
}

// keptStmt is one of the Runner's own statements kept prepared on its pool
// where lease.Options.Prepare says so (on SQLite by default, where parsing
// a statement costs about as much as running it): prepared at its first
// use, sent as text when preparing fails (and prepared again next time),
// and closed by Runner.Close, after which it is sent as text. A query
// running while it is closed finishes: database/sql closes the statement
// when the query is done.
type keptStmt struct {
	query string
	on    bool // prepare at all

	mu     sync.RWMutex
	s      *sql.Stmt
	closed bool
}

// newKeptStmt is q, kept prepared on a pool when mode (and, for
// lease.PrepareAuto, the dialect) says so.
func newKeptStmt(q string, d lease.Dialect, mode lease.PrepareMode) *keptStmt {
	return &keptStmt{query: q, on: engine.Prepares(mode, d)}
}

// queryRow runs the statement on db with args.
func (k *keptStmt) queryRow(ctx context.Context, db lease.DB, args ...any) *sql.Row {
	p, ok := db.(preparer)
	if !k.on || !ok {
		return db.QueryRowContext(ctx, k.query, args...)
	}
	k.mu.RLock()
	if k.s == nil && !k.closed {
		k.mu.RUnlock()
		k.prepare(ctx, p)
		k.mu.RLock()
	}
	defer k.mu.RUnlock()
	if k.s != nil {
		// The Row holds its result; database/sql keeps the statement open
		// until the Row is scanned, even if it is closed meanwhile.
		return k.s.QueryRowContext(ctx, args...)
	}
	return db.QueryRowContext(ctx, k.query, args...)
}

func (k *keptStmt) prepare(ctx context.Context, p preparer) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.s != nil || k.closed {
		return
	}
	if s, err := p.PrepareContext(ctx, k.query); err == nil {
		k.s = s
	}
}

// close closes the prepared statement; the text is sent from then on.
func (k *keptStmt) close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	if k.s == nil {
		return nil
	}
	err := k.s.Close()
	k.s = nil
	return err
}
