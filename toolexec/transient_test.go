package toolexec_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/toolexec"
)

// busyError is SQLite's SQLITE_BUSY as modernc.org/sqlite reports it.
type busyError struct{}

func (busyError) Error() string { return "database is locked (5) (SQLITE_BUSY)" }
func (busyError) Code() int     { return 5 }

// raiseTransient makes the database report a deadlock or serialization
// failure inside x.Tx: a real driver error on MySQL (1213) and PostgreSQL
// (40001); on SQLite, SQLITE_BUSY as the driver reports it.
func raiseTransient(ctx context.Context, x toolexec.Exec, d lease.Dialect) error {
	var err error
	switch d {
	case lease.MySQL:
		_, err = x.Tx.ExecContext(ctx, "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'Deadlock found when trying to get lock'")
	case lease.Postgres:
		_, err = x.Tx.ExecContext(ctx, "DO $$ BEGIN RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001'; END $$")
	default:
		err = busyError{}
	}
	if err == nil {
		return fmt.Errorf("the database raised nothing")
	}
	return err
}

// Item: a transient database error inside a side effect is not the tool's
// failure. It is retried (the transaction rolled back entirely), and if it
// persists it is reported as ErrTransient, the call left free to retry.
func TestTransientErrorsInASideEffect(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)

		t.Run("retried", func(t *testing.T) {
			f := e.newFlow(t, "s-retried", ttl)
			runs := 0
			res, err := e.store.Run(ctx, db, f.call(`{"a":1}`), e.opts(f, ttl), func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
				runs++
				if _, err := e.ledger(ctx, x); err != nil {
					return nil, err
				}
				if runs < 3 {
					return nil, raiseTransient(ctx, x, e.d)
				}
				return json.RawMessage(`{"ok":true}`), nil
			})
			require.NoError(t, err)
			assert.Equal(t, 3, runs)
			assert.Equal(t, schema.StatusSuccess, e.toolRow(t, res.ExecutionID).State)
			var n int
			require.NoError(t, db.GetContext(ctx, &n, e.d.Rebind("SELECT COUNT(*) FROM ledger WHERE request_id = ?"), f.requestID))
			assert.Equal(t, 1, n, "the rolled-back runs left nothing")
		})

		t.Run("persistent", func(t *testing.T) {
			f := e.newFlow(t, "s-persistent", ttl)
			runs := 0
			_, err := e.store.Run(ctx, db, f.call(`{"a":2}`), e.opts(f, ttl), func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
				runs++
				return nil, raiseTransient(ctx, x, e.d)
			})
			require.Error(t, err)
			assert.ErrorIs(t, err, toolexec.ErrTransient)
			assert.True(t, lease.IsTransient(err))
			assert.NotErrorIs(t, err, toolexec.ErrToolFailed, "not shown to the model as the tool's failure")
			assert.Greater(t, runs, 1)
			var id string
			require.NoError(t, db.GetContext(ctx, &id, e.d.Rebind("SELECT id FROM "+schema.ToolExecutionTable+" WHERE request_id = ?"), f.requestID))
			row := e.toolRow(t, id)
			assert.Equal(t, schema.StatusProcessing, row.State, "not marked error")
			assert.False(t, row.Held, "free for a retry")
			assert.True(t, row.errNull)
		})
	})
}
