package engine_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// TestInTxRunsTheKeptStatements: on SQLite, where a Lease keeps its
// statements prepared, operations in transactions given through InTx
// run the pool's statements bound to the transaction: after the first
// transaction on a connection prepared them there, later transactions
// prepare nothing, and every operation does what it does on the bare
// *sql.Tx (here: acquire, confirm, release; each grant checked).
func TestInTxRunsTheKeptStatements(t *testing.T) {
	c := &countdb.Counter{}
	db := openCounted(t, engine.SQLite, c)
	// Two connections: a transaction holds one, and a statement not kept
	// yet is prepared on the pool through the other.
	db.SetMaxOpenConns(2)
	db.SetMaxIdleConns(2)
	e := conformance.Setup(t, db, engine.Options{})
	ctx := context.Background()
	require.NoError(t, e.Lease.Ensure(ctx, db, "k", engine.CreateOptions{}))
	round := func(wrap bool) {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		var in engine.DB = tx
		if wrap {
			in = engine.InTx(db, tx)
		}
		g, err := e.Lease.Acquire(ctx, in, "k", "h", time.Minute)
		require.NoError(t, err)
		gen, err := e.Lease.Confirm(ctx, in, g)
		require.NoError(t, err)
		assert.Equal(t, g.Generation, gen)
		require.NoError(t, e.Lease.Release(ctx, in, g))
		require.NoError(t, tx.Commit())
	}
	c.Reset()
	round(true) // prepares the three statements on the pool and on the transaction's connection
	require.Positive(t, c.Stats().Prepares, "the first transaction through InTx prepares the kept statements")
	round(true) // on the other connection, maybe: both have them now
	c.Reset()
	for range 5 {
		round(true)
	}
	st := c.Stats()
	assert.Zero(t, st.Prepares, "transactions through InTx after the first prepare nothing")
	assert.Equal(t, int64(15), st.Statements)

	// The same rounds on the bare transaction give the same results (the
	// generation moves on by one per acquire either way).
	g, err := e.Lease.Acquire(ctx, db, "k", "h", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, int64(8), g.Generation, "seven acquires through InTx, then this one")
	require.NoError(t, e.Lease.Release(ctx, db, g))
	round(false)
}

// TestInTxPassesThrough: InTx gives tx itself when db is not a pool or tx
// is nil; and a transaction of another pool cannot run the first pool's
// statements: the operation returns database/sql's error, nothing else.
func TestInTxPassesThrough(t *testing.T) {
	db := testdb.Open(t, engine.SQLite)
	e := conformance.Setup(t, db, engine.Options{})
	ctx := context.Background()
	require.NoError(t, e.Lease.Ensure(ctx, db, "k", engine.CreateOptions{}))
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()

	assert.Same(t, tx, engine.InTx(connBeginner{conn}, tx), "not a pool")
	assert.Nil(t, engine.InTx(db, nil).(*sql.Tx), "nil tx")

	other := testdb.Open(t, engine.SQLite)
	conformance.Setup(t, other, engine.Options{}) // its statements prepare there
	_, err = e.Lease.Acquire(ctx, engine.InTx(other, tx), "k", "h", time.Minute)
	require.ErrorContains(t, err, "statement from different database used", "a transaction of db with other's statements")
}

// connBeginner is a *sql.Conn as a engine.TxBeginner: not a pool.
type connBeginner struct{ *sql.Conn }

func (c connBeginner) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return c.Conn.ExecContext(ctx, q, args...)
}
