package engine_test

import (
	"context"
	"database/sql/driver"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/retry"
)

// victim is each dialect's "rolled back, nothing applied" error: a
// deadlock or certification failure (MySQL/Galera 1213), a serialization
// failure (PostgreSQL 40001), SQLite's busy.
func victim(d engine.Dialect) error {
	switch d {
	case engine.MySQL:
		return &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock; try restarting transaction"}
	case engine.Postgres:
		return &fakePgError{"40001"}
	}
	return &fakeSQLiteError{5}
}

// TestSQLMockVictimRetried: every lease operation on a pool that fails as
// a deadlock, serialization or certification victim (nothing applied) is
// sent again, after a jittered pause, and succeeds; on SQLite, whose busy
// timeout already waited, the error is returned at once.
func TestSQLMockVictimRetried(t *testing.T) {
	for _, d := range mockDialects {
		for _, op := range mockOpsFilled() {
			t.Run(d.String()+"/"+op.name, func(t *testing.T) {
				db, mock := newMock(t)
				l := newMockLease(t, d)
				g := mockGrant(t)
				expectOp(t, mock, d, op, g, outcome{err: victim(d)})
				if d == engine.SQLite {
					_, _, err := op.run(context.Background(), l, db, g)
					assert.True(t, engine.IsRetryable(err), "%v", err)
					return
				}
				expectOp(t, mock, d, op, g, outcome{gen: 3, status: []driver.Value{"alice", 3, "processing", 1, 1000}})
				_, _, err := op.run(context.Background(), l, db, g)
				require.NoError(t, err)
			})
		}
	}
}

// TestSQLMockVictimInTxNotRetried: inside a transaction the victim's whole
// transaction was rolled back: the error is returned at once, for the
// caller to run the transaction again.
func TestSQLMockVictimInTxNotRetried(t *testing.T) {
	for _, d := range []engine.Dialect{engine.MySQL, engine.Postgres} {
		t.Run(d.String(), func(t *testing.T) {
			db, mock := newMock(t)
			l := newMockLease(t, d)
			g := mockGrant(t)
			mock.ExpectBegin()
			expectOp(t, mock, d, mockOp1(t, "Renew"), g, outcome{err: victim(d)})
			mock.ExpectRollback()
			tx, err := db.Begin()
			require.NoError(t, err)
			_, _, err = mockOp1(t, "Renew").run(context.Background(), l, tx, g)
			assert.True(t, engine.IsRetryable(err))
			require.NoError(t, tx.Rollback())
		})
	}
}

// TestSQLMockVictimBounded: a victim every time is returned after
// retry.MaxAttempts sends, as the database's error (never as a loss).
func TestSQLMockVictimBounded(t *testing.T) {
	db, mock := newMock(t)
	l := newMockLease(t, engine.MySQL)
	g := mockGrant(t)
	for range retry.MaxAttempts {
		expectOp(t, mock, engine.MySQL, mockOp1(t, "Renew"), g, outcome{err: victim(engine.MySQL)})
	}
	_, _, err := mockOp1(t, "Renew").run(context.Background(), l, db, g)
	assert.True(t, engine.IsRetryable(err))
	assert.NotErrorIs(t, err, engine.ErrLost)
}

// causalOp is op sent under wsrep_sync_wait (Options.MultiPrimary).
func causalOp(op mockOp) mockOp {
	op.sql = map[engine.Dialect]any{engine.MySQL: "SET STATEMENT wsrep_sync_wait=15 FOR " + op.sql[engine.MySQL].(string)}
	return op
}

// TestSQLMockMultiPrimaryMissConfirmed: with Options.MultiPrimary, a
// token-checked statement that matched no row is sent once more under
// wsrep_sync_wait, so that a node that had not applied the holder's own
// earlier write cannot make the grant look lost: when the causal run
// matches, the operation succeeds; only a second miss is ErrLost. Without
// MultiPrimary (single servers) a miss is ErrLost after one statement.
func TestSQLMockMultiPrimaryMissConfirmed(t *testing.T) {
	ops := []string{"Renew", "Confirm", "Release", "Delete", "TransitionKeep", "TransitionRelease", "Verify", "VerifyLock"}
	for _, name := range ops {
		t.Run(name, func(t *testing.T) {
			op := mockOp1(t, name)
			l, err := engine.New[string](engine.MySQL, mockTable, engine.Options{Prepare: engine.PrepareNever, MultiPrimary: true, SkipCheck: true})
			require.NoError(t, err)

			db, mock := newMock(t)
			g := mockGrant(t)
			expectOp(t, mock, engine.MySQL, op, g, outcome{noMatch: true})
			expectOp(t, mock, engine.MySQL, causalOp(op), g, outcome{gen: 2})
			_, _, err = op.run(context.Background(), l, db, g)
			require.NoError(t, err, "the causal run matched: not lost")

			db2, mock2 := newMock(t)
			expectOp(t, mock2, engine.MySQL, op, g, outcome{noMatch: true})
			expectOp(t, mock2, engine.MySQL, causalOp(op), g, outcome{noMatch: true})
			_, _, err = op.run(context.Background(), l, db2, g)
			assert.ErrorIs(t, err, engine.ErrLost)
		})
	}
	_, err := engine.New[string](engine.Postgres, mockTable, engine.Options{MultiPrimary: true})
	assert.ErrorIs(t, err, engine.ErrInvalid, "MultiPrimary is for the MySQL dialect")
}
