package engine

import (
	"context"
	"database/sql"
)

// InTx returns tx, a transaction that db began, as the DB to pass to a
// Lease's operations inside it. On it the operations run the statements
// the Lease keeps prepared on db (see Options.Prepare: on SQLite by
// default), bound to tx's connection (Tx.StmtContext) instead of parsed
// again for every statement, which on SQLite costs about as much as
// running it. The statements are the same and so are the results; pass
// tx itself to anything that is not a Lease operation.
//
// When db is not a pool (a *sql.DB or *sqlx.DB: it has no PrepareContext
// and Stats) or tx is nil, InTx returns tx as it is. tx must have been
// begun by db: database/sql refuses to run another pool's statement in
// it, and the operation returns that error ("statement from different
// database used").
//
// RunFenced does this for its own statements (the fences and the marks)
// when its db is a pool.
func InTx(db TxBeginner, tx *sql.Tx) DB {
	if _, ok := db.(pool); !ok || tx == nil || isNil(db) {
		return tx
	}
	return pooledTx{tx: tx, pool: db}
}

// pooledTx is a transaction with the pool that began it (InTx). It is
// not a pool itself (no Stats): operations on it run inside the
// transaction, as on a *sql.Tx.
type pooledTx struct {
	tx   *sql.Tx
	pool DB // a pool (InTx checked it)
}

func (t pooledTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(ctx, q, args...)
}

func (t pooledTx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return t.tx.QueryContext(ctx, q, args...)
}

func (t pooledTx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return t.tx.QueryRowContext(ctx, q, args...)
}
