package toolexec_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
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
	if d == lease.SQLite {
		return busyError{}
	}
	return failInTx(ctx, x, d,
		"SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'Deadlock found when trying to get lock'",
		"DO $$ BEGIN RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001'; END $$")
}

// failInTx runs, inside x.Tx, the statement of d (mysql or postgres) that
// must fail, and returns the driver's error.
func failInTx(ctx context.Context, x toolexec.Exec, d lease.Dialect, mysql, postgres string) error {
	q := postgres
	if d == lease.MySQL {
		q = mysql
	}
	if _, err := x.Tx.ExecContext(ctx, q); err != nil {
		return err
	}
	return fmt.Errorf("the database raised nothing")
}

// Item: a transient database error inside a side effect is not the tool's
// failure. It is retried (the transaction rolled back entirely), and if it
// persists it is reported as *TransientError, the call left free to retry.
func TestTransientErrorsInASideEffect(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)

		t.Run("retried", func(t *testing.T) {
			f := e.newFlow(t, "s-retried", ttl)
			runs := 0
			res, err := e.store.Execute(ctx, db, f.call(`{"a":1}`), e.opts(f, ttl), func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
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
			assert.Equal(t, schema.StoredSucceeded, e.toolRow(t, res.ExecutionID).State)
			var n int
			require.NoError(t, db.GetContext(ctx, &n, e.d.Rebind("SELECT COUNT(*) FROM ledger WHERE request_id = ?"), f.requestID))
			assert.Equal(t, 1, n, "the rolled-back runs left nothing")
		})

		t.Run("persistent", func(t *testing.T) {
			f := e.newFlow(t, "s-persistent", ttl)
			runs := 0
			_, err := e.store.Execute(ctx, db, f.call(`{"a":2}`), e.opts(f, ttl), func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
				runs++
				return nil, raiseTransient(ctx, x, e.d)
			})
			require.Error(t, err)
			assert.ErrorAs(t, err, new(*toolexec.TransientError))
			assert.True(t, lease.IsTransient(err))
			assert.NotErrorAs(t, err, new(*toolexec.FailedError), "not shown to the model as the tool's failure")
			assert.Greater(t, runs, 1)
			var id string
			require.NoError(t, db.GetContext(ctx, &id, e.d.Rebind("SELECT id FROM "+schema.ToolExecutionTable+" WHERE request_id = ?"), f.requestID))
			row := e.toolRow(t, id)
			assert.Equal(t, schema.StoredProcessing, row.State, "not marked error")
			assert.False(t, row.Held, "free for a retry")
			assert.True(t, row.errNull)
		})
	})
}

// TestRunAfterAFailedMarkIsWatched: the success mark (made after Execute let
// go of the watch) ends in a transient error, so the side effect's
// transaction runs again. The side effect runs under a watch every time:
// Execute calls Watch again, with the same grant, after stopping the first.
func TestRunAfterAFailedMarkIsWatched(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			c := &countdb.Counter{}
			db := testdb.OpenWith(t, d, func(driver, dsn string) (*sql.DB, error) { return countdb.OpenDB(driver, dsn, c) })
			e := newEnv(t, db)
			ctx := bg(t)
			f := e.newFlow(t, "s-mark", ttl)
			var marks atomic.Int64
			c.FailAfter(func(q string) error {
				// The mark: an UPDATE of the tool row that sets its result,
				// alone (SQLite) or in the fences' joint statement.
				if strings.Contains(q, "UPDATE ") && strings.Contains(q, schema.ToolExecutionTable) &&
					strings.Contains(q, schema.ColResult) && marks.Add(1) == 1 {
					return busyError{}
				}
				return nil
			})
			defer c.FailAfter(nil)
			var watches, stops, active atomic.Int64
			var grants []toolexec.Grant
			o := e.opts(f, ttl)
			o.Watch = func(g toolexec.Grant) func() {
				watches.Add(1)
				active.Add(1)
				grants = append(grants, g)
				var once sync.Once
				return func() { once.Do(func() { stops.Add(1); active.Add(-1) }) }
			}
			var watchedRuns []int64
			res, err := e.store.Execute(ctx, db, f.call(`{"a":3}`), o, func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
				watchedRuns = append(watchedRuns, active.Load())
				return e.ledger(ctx, x)
			})
			require.NoError(t, err)
			assert.Equal(t, int64(2), marks.Load(), "the first mark failed, the second went through")
			assert.Equal(t, []int64{1, 1}, watchedRuns, "each run of the side effect is watched")
			assert.Equal(t, int64(2), watches.Load())
			assert.Equal(t, int64(2), stops.Load())
			assert.Equal(t, int64(0), active.Load())
			require.Len(t, grants, 2)
			assert.Equal(t, grants[0].Generation, grants[1].Generation)
			assert.Equal(t, res.ExecutionID, grants[1].Key)
			assert.Equal(t, schema.StoredSucceeded, e.toolRow(t, res.ExecutionID).State)
		})
	}
}

// killConnection ends x.Tx's own connection from the server side, as a
// server restart or an administrator would, and returns the driver's
// error: PostgreSQL's 57P01 (pg_terminate_backend), MariaDB's 1927 or a
// broken connection (KILL).
func killConnection(ctx context.Context, x toolexec.Exec, d lease.Dialect) error {
	return failInTx(ctx, x, d, "KILL CONNECTION_ID()", "SELECT pg_terminate_backend(pg_backend_pid())")
}

// Item: a database that goes away inside a side effect's transaction is
// not the tool's failure either. The call is not marked error and is left
// free, nothing committed, Execute returns the database's error (the run
// ends; HTTP 503), and the call made again runs once.
func TestUnavailableInASideEffect(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		check := func(t *testing.T, f *flow, args string, raise func(context.Context, toolexec.Exec) error) {
			runs := 0
			_, err := e.store.Execute(ctx, db, f.call(args), e.opts(f, ttl), func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
				runs++
				if _, err := e.ledger(ctx, x); err != nil {
					return nil, err
				}
				return nil, raise(ctx, x)
			})
			require.Error(t, err)
			assert.True(t, lease.IsUnavailable(err), "%v", err)
			assert.NotErrorAs(t, err, new(*toolexec.FailedError), "not shown to the model as the tool's failure")
			assert.Equal(t, 1, runs, "not run again against a database that went away")
			var id string
			require.NoError(t, db.GetContext(ctx, &id, e.d.Rebind("SELECT id FROM "+schema.ToolExecutionTable+" WHERE request_id = ?"), f.requestID))
			row := e.toolRow(t, id)
			assert.Equal(t, schema.StoredProcessing, row.State, "not marked error")
			assert.False(t, row.Held, "free for the resend")
			assert.True(t, row.errNull)
			var n int
			require.NoError(t, db.GetContext(ctx, &n, e.d.Rebind("SELECT COUNT(*) FROM ledger WHERE request_id = ?"), f.requestID))
			assert.Equal(t, 0, n, "nothing committed")

			// The resend makes the same call: it runs once, and commits.
			res, err := e.store.Execute(ctx, db, f.call(args), e.opts(f, ttl), func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
				runs++
				return e.ledger(ctx, x)
			})
			require.NoError(t, err)
			assert.Equal(t, 2, runs)
			assert.Equal(t, id, res.ExecutionID, "the same call")
			assert.Equal(t, schema.StoredSucceeded, e.toolRow(t, id).State)
			require.NoError(t, db.GetContext(ctx, &n, e.d.Rebind("SELECT COUNT(*) FROM ledger WHERE request_id = ?"), f.requestID))
			assert.Equal(t, 1, n)
		}

		t.Run("broken connection", func(t *testing.T) {
			check(t, e.newFlow(t, "s-badconn", ttl), `{"a":1}`, func(context.Context, toolexec.Exec) error {
				// What database/sql and pgx report for a connection that
				// broke mid-statement.
				return fmt.Errorf("insert ledger row: %w", driver.ErrBadConn)
			})
		})
		if e.d != lease.SQLite { // a server to end the connection
			t.Run("connection killed", func(t *testing.T) {
				check(t, e.newFlow(t, "s-killed", ttl), `{"a":2}`, func(ctx context.Context, x toolexec.Exec) error {
					return killConnection(ctx, x, e.d)
				})
			})
		}
	})
}
