package toolexec_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/sqlitedsn"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/toolexec"
)

// Item: on SQLite a side effect that writes through the pool instead of
// x.Tx, while the flow's transaction holds the write lock, is refused with
// *OutsideTxError after one busy timeout: not retried, not transient, the
// call left free and nothing committed.
func TestWriteOutsideTxOnSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outside.db")
	db, err := sqlx.Open("sqlite", testdb.SQLiteDSN(path))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	// The pool the side effect wrongly writes through: the same file, with
	// a short busy timeout so that the test does not wait out the long one.
	pool, err := sqlx.Open("sqlite", sqlitedsn.Modernc(path, sqlitedsn.Settings{BusyTimeout: 50 * time.Millisecond}))
	require.NoError(t, err)
	t.Cleanup(func() { pool.Close() })

	e := newEnv(t, db)
	ctx := bg(t)
	f := e.newFlow(t, "s-outside", ttl)
	o := e.opts(f, ttl)
	o.Flow = engine.NewFlowDB(db, e.d)
	runs := 0
	_, err = e.store.Execute(ctx, db, f.call(`{"a":1}`), o, func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
		runs++
		_, err := pool.ExecContext(ctx, "INSERT INTO ledger (execution_id, request_id, amount) VALUES (?, ?, ?)", x.ExecutionID, x.Call.RequestID, "1")
		return nil, err
	})
	require.Error(t, err)
	assert.ErrorAs(t, err, new(*toolexec.OutsideTxError))
	var oe *toolexec.OutsideTxError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "create_transaction", oe.Tool)
	assert.Contains(t, err.Error(), "write through x.Tx")
	assert.False(t, lease.IsTransient(err), "running it again fails the same way: %v", err)
	assert.NotErrorAs(t, err, new(*toolexec.TransientError))
	assert.NotErrorAs(t, err, new(*toolexec.FailedError), "a bug of the service, not a failure for the model")
	assert.Equal(t, 1, runs, "refused at once, not run again")

	row := e.toolRow(t, e.onlyToolID(t))
	assert.Equal(t, schema.StoredProcessing, row.State, "not marked error")
	assert.False(t, row.Held, "left free")
	assert.Equal(t, 0, e.ledgerRows(t), "nothing committed")

	// Without a flow routed into it (Execute called directly, the DSN's
	// transaction mode deciding when the lock is taken) a busy error is
	// transient, as before.
	f2 := e.newFlow(t, "s-unrouted", ttl)
	_, err = e.store.Execute(ctx, db, f2.call(`{"a":2}`), e.opts(f2, ttl), func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
		return nil, busyError{}
	})
	assert.ErrorAs(t, err, new(*toolexec.TransientError))
	assert.NotErrorAs(t, err, new(*toolexec.OutsideTxError))
}

// What the documentation says of the other dialects: on MariaDB and
// PostgreSQL a write through the pool inside a side effect is not refused;
// it commits on its own, outside the fence, even when the tool then fails
// and its transaction rolls back.
func TestWriteOutsideTxCommitsOnServers(t *testing.T) {
	// SQLite refuses such a write: TestWriteOutsideTxOnSQLite.
	for _, d := range []lease.Dialect{lease.MySQL, lease.Postgres} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			writeOutsideTxCommits(t, testdb.Open(t, d))
		})
	}
}

func writeOutsideTxCommits(t *testing.T, db *sqlx.DB) {
	{
		e := newEnv(t, db)
		ctx := bg(t)
		f := e.newFlow(t, "s-outside", ttl)
		o := e.opts(f, ttl)
		o.Flow = engine.NewFlowDB(db, e.d)
		_, err := e.store.Execute(ctx, db, f.call(`{"a":1}`), o, func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
			if _, err := db.ExecContext(ctx, e.d.Rebind("INSERT INTO ledger (execution_id, request_id, amount) VALUES (?, ?, ?)"), x.ExecutionID, x.Call.RequestID, "1"); err != nil {
				return nil, err
			}
			return nil, assert.AnError
		})
		assert.ErrorAs(t, err, new(*toolexec.FailedError))
		assert.NotErrorAs(t, err, new(*toolexec.OutsideTxError))
		assert.Equal(t, 1, e.ledgerRows(t), "the pool's write committed although the tool's transaction rolled back")
	}
}
