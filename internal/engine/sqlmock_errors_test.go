package engine_test

// go-sqlmock tests of the error paths (see sqlmock_test.go): driver errors,
// misses, duplicate keys of each driver, MySQL's matched-but-unchanged OK
// packet, a Galera node that is behind.

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
)

// TestSQLMockDriverErrorAsIs: a driver error comes back as it is — never
// hidden as a lost lease, a conflict or a missing row — and an acquire that
// failed with an error reads nothing more.
func TestSQLMockDriverErrorAsIs(t *testing.T) {
	boom := errors.New("driver: connection reset by peer")
	for _, d := range mockDialects {
		for _, op := range mockOpsFilled() {
			t.Run(d.String()+"/"+op.name, func(t *testing.T) {
				db, mock := newMock(t)
				l := newMockLease(t, d)
				g := mockGrant(t)
				seen := expectOp(t, mock, d, op, g, outcome{err: boom})
				_, _, err := op.run(context.Background(), l, db, g)
				require.Error(t, err)
				assert.ErrorIs(t, err, boom)
				for _, s := range []error{engine.ErrLost, engine.ErrHeld, engine.ErrNotFound, engine.ErrState, engine.ErrExists, engine.ErrInvalid} {
					assert.NotErrorIs(t, err, s)
				}
				noSecret(t, err, engine.Secret(g.Token), *seen)
			})
		}
	}
}

// TestSQLMockResultErrors: on MySQL an error reading the OK packet's counts
// is returned, not taken for a loss.
func TestSQLMockResultErrors(t *testing.T) {
	bad := errors.New("driver: no RowsAffected available")
	db, mock := newMock(t)
	l := newMockLease(t, engine.MySQL)
	g := mockGrant(t)
	op := mockOp1(t, "Renew")
	mock.ExpectExec(op.sql[engine.MySQL].(string)).WithArgs(mockArgs(op.args[engine.MySQL].([]any), tokenArg{want: engine.Secret(g.Token)})...).
		WillReturnResult(sqlmock.NewErrorResult(bad))
	_, err := l.Renew(context.Background(), db, g, 7*time.Second)
	assert.ErrorIs(t, err, bad)
	assert.NotErrorIs(t, err, engine.ErrLost)

	// On PostgreSQL and SQLite a RETURNING value that does not scan is an
	// error too, not a loss.
	for _, d := range []engine.Dialect{engine.Postgres, engine.SQLite} {
		op := mockOp1(t, "Renew")
		mock.ExpectQuery(op.sql[d].(string)).WithArgs(mockArgs(op.args[d].([]any), tokenArg{want: engine.Secret(g.Token)})...).
			WillReturnRows(sqlmock.NewRows([]string{"generation"}).AddRow("not a number"))
		_, err := newMockLease(t, d).Renew(context.Background(), db, g, 7*time.Second)
		require.Error(t, err)
		assert.NotErrorIs(t, err, engine.ErrLost)
		noSecret(t, err, engine.Secret(g.Token))
	}
}

// TestSQLMockNoMatchIsLost: a token-checked write that matches no row (0
// rows affected on MySQL, no RETURNING row elsewhere) is a *LostError
// naming the operation, and nothing more is read.
func TestSQLMockNoMatchIsLost(t *testing.T) {
	cases := map[string]string{ // op → LostError.Op
		"Renew": "renew", "Release": "release", "Delete": "delete", "TransitionKeep": "transition",
		"TransitionRelease": "transition", "Verify": "check", "VerifyLock": "check",
	}
	for _, d := range mockDialects {
		for name, wantOp := range cases {
			t.Run(d.String()+"/"+name, func(t *testing.T) {
				db, mock := newMock(t)
				l := newMockLease(t, d)
				g := mockGrant(t)
				g.Deadline = time.Unix(1767225600, 0)
				op := mockOp1(t, name)
				expectOp(t, mock, d, op, g, outcome{noMatch: true})
				gen, tok, err := op.run(context.Background(), l, db, g)
				var le *engine.LostError
				require.ErrorAs(t, err, &le)
				assert.Equal(t, &engine.LostError{Key: "k", Op: wantOp}, le)
				assert.ErrorIs(t, err, engine.ErrLost)
				assert.NotErrorIs(t, err, engine.ErrHeld)
				noSecret(t, err, engine.Secret(g.Token))
				if name == "Verify" || name == "VerifyLock" {
					assert.Zero(t, gen)
				} else if name != "Release" && name != "Delete" {
					assert.Equal(t, g.Generation, gen, "a lost grant comes back unchanged")
					assert.True(t, engine.SameToken(tok, g.Token))
				}
			})
		}
	}
}

// TestSQLMockRenewLostKeepsGrant: a failed renew returns the grant it was
// given, deadline included, so a caller that ignores the error still sees
// its old (shrinking) deadline rather than a fresh one.
func TestSQLMockRenewLostKeepsGrant(t *testing.T) {
	for _, d := range mockDialects {
		t.Run(d.String(), func(t *testing.T) {
			db, mock := newMock(t)
			l := newMockLease(t, d)
			g := mockGrant(t)
			g.Deadline = time.Unix(1767225600, 0)
			expectOp(t, mock, d, mockOp1(t, "Renew"), g, outcome{noMatch: true})
			g2, err := l.Renew(context.Background(), db, g, 7*time.Second)
			require.ErrorIs(t, err, engine.ErrLost)
			assert.Equal(t, g, g2)
		})
	}
}

// TestSQLMockAcquireFailureClassified: an acquire that matches no row reads
// the row once to say why.
func TestSQLMockAcquireFailureClassified(t *testing.T) {
	boom := errors.New("driver: read timeout")
	for _, d := range mockDialects {
		t.Run(d.String(), func(t *testing.T) {
			ctx := context.Background()
			g := mockGrant(t)

			t.Run("Held", func(t *testing.T) {
				db, mock := newMock(t)
				l := newMockLease(t, d)
				seen := expectOp(t, mock, d, mockOp1(t, "Acquire"), g, outcome{noMatch: true})
				expectInspect(t, mock, d, outcome{status: []driver.Value{"bob", int64(4), "processing", int64(1), int64(1500000)}})
				_, err := l.Acquire(ctx, db, "k", "alice", 5*time.Second)
				var ce *engine.ConflictError
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, &engine.ConflictError{Key: "k", Holder: "bob", Generation: 4, Remaining: 1500 * time.Millisecond}, ce)
				assert.ErrorIs(t, err, engine.ErrHeld)
				assert.NotErrorIs(t, err, engine.ErrLost)
				assert.EqualError(t, err, `lease: held by another holder (key "k", holder "bob", generation 4, 1.5s left)`)
				noSecret(t, err, *seen)
			})
			t.Run("HeldReentryWithForeignToken", func(t *testing.T) {
				db, mock := newMock(t)
				l := newMockLease(t, d)
				expectOp(t, mock, d, mockOp1(t, "AcquireReentry"), g, outcome{noMatch: true})
				expectInspect(t, mock, d, outcome{status: []driver.Value{"bob", int64(4), "processing", int64(1), int64(900)}})
				_, err := l.AcquireWith(ctx, db, "k", "alice", 5*time.Second, engine.AcquireOptions{Token: g.Token})
				assert.ErrorIs(t, err, engine.ErrHeld)
				noSecret(t, err, engine.Secret(g.Token))
			})
			t.Run("NotFound", func(t *testing.T) {
				db, mock := newMock(t)
				l := newMockLease(t, d)
				seen := expectOp(t, mock, d, mockOp1(t, "Acquire"), g, outcome{noMatch: true})
				expectInspect(t, mock, d, outcome{noMatch: true})
				_, err := l.Acquire(ctx, db, "k", "alice", 5*time.Second)
				assert.ErrorIs(t, err, engine.ErrNotFound)
				assert.NotErrorIs(t, err, engine.ErrHeld)
				noSecret(t, err, *seen)
			})
			t.Run("WrongState", func(t *testing.T) {
				db, mock := newMock(t)
				l := newMockLease(t, d)
				seen := expectOp(t, mock, d, mockOp1(t, "AcquireWithStatesAndSet"), g, outcome{noMatch: true})
				expectInspect(t, mock, d, outcome{status: []driver.Value{"", int64(4), "done", int64(0), int64(0)}})
				_, err := l.AcquireWith(ctx, db, "k", "alice", 5*time.Second, engine.AcquireOptions{
					InStates: []string{"queued", "error"}, SetState: "processing", Set: []engine.Assignment{engine.Set("note", "n1")},
				})
				var se *engine.StateError
				require.ErrorAs(t, err, &se)
				assert.Equal(t, &engine.StateError{Key: "k", State: "done", Want: []string{"queued", "error"}}, se)
				assert.ErrorIs(t, err, engine.ErrState)
				assert.NotErrorIs(t, err, engine.ErrHeld)
				noSecret(t, err, *seen)
			})
			t.Run("FreedInBetween", func(t *testing.T) {
				// Held at the write, free at the read: someone released in
				// between. Still a conflict, with no time left.
				db, mock := newMock(t)
				l := newMockLease(t, d)
				expectOp(t, mock, d, mockOp1(t, "AcquireWithStatesAndSet"), g, outcome{noMatch: true})
				expectInspect(t, mock, d, outcome{status: []driver.Value{"", int64(5), "queued", int64(0), int64(0)}})
				_, err := l.AcquireWith(ctx, db, "k", "alice", 5*time.Second, engine.AcquireOptions{
					InStates: []string{"queued", "error"}, SetState: "processing", Set: []engine.Assignment{engine.Set("note", "n1")},
				})
				var ce *engine.ConflictError
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, &engine.ConflictError{Key: "k", Generation: 5}, ce)
			})
			t.Run("InspectError", func(t *testing.T) {
				db, mock := newMock(t)
				l := newMockLease(t, d)
				expectOp(t, mock, d, mockOp1(t, "Acquire"), g, outcome{noMatch: true})
				expectInspect(t, mock, d, outcome{err: boom})
				_, err := l.Acquire(ctx, db, "k", "alice", 5*time.Second)
				assert.ErrorIs(t, err, boom)
				assert.NotErrorIs(t, err, engine.ErrHeld)
			})
		})
	}
}

// TestSQLMockMySQLMatchedUnchanged: go-sql-driver/mysql counts changed rows
// by default, so a write that matched the row but left it as it was reports
// 0 rows affected. That can only happen on an expiry column coarser than a
// microsecond, and only there — when it is declared with
// Options.ExpiryResolution — does the generation that LAST_INSERT_ID put in
// the OK packet count as a match. On a microsecond column every success
// changes the row, and 0 rows with a non-zero insert id is what an engine
// that misreports LAST_INSERT_ID(expr) (Vitess 16.0) sends for no match:
// it is a loss, not a grant.
func TestSQLMockMySQLMatchedUnchanged(t *testing.T) {
	ops := []string{"Renew", "Release", "TransitionKeep", "TransitionRelease"}
	for _, name := range append([]string{"Acquire", "AcquireReentry", "AcquireWithStatesAndSet"}, ops...) {
		t.Run("declared coarse/"+name, func(t *testing.T) {
			db, mock := newMock(t)
			l, err := engine.New[string](engine.MySQL, mockTable, engine.Options{Prepare: engine.PrepareNever, ExpiryResolution: time.Second, SkipCheck: true})
			require.NoError(t, err)
			g := mockGrant(t)
			op := mockOp1(t, name)
			expectOp(t, mock, engine.MySQL, op, g, outcome{gen: 7, unchanged: true})
			gen, _, err := op.run(context.Background(), l, db, g)
			require.NoError(t, err, "matched but unchanged is not lost")
			if gen != -1 {
				assert.Equal(t, int64(7), gen)
			}
		})
	}
	for _, name := range ops {
		t.Run("microsecond/"+name, func(t *testing.T) {
			db, mock := newMock(t)
			l := newMockLease(t, engine.MySQL)
			g := mockGrant(t)
			op := mockOp1(t, name)
			expectOp(t, mock, engine.MySQL, op, g, outcome{gen: 7, unchanged: true})
			_, _, err := op.run(context.Background(), l, db, g)
			assert.ErrorIs(t, err, engine.ErrLost, "an insert id without a changed row is not trusted")
		})
	}
}

// TestSQLMockDuplicateKey: each driver's unique-key violation becomes
// *DuplicateKeyError (ErrExists) that unwraps to the driver error; other
// constraint errors come back as they are.
func TestSQLMockDuplicateKey(t *testing.T) {
	cases := []struct {
		d    engine.Dialect
		err  error
		dup  bool
		name string
	}{
		{engine.MySQL, &mysql.MySQLError{Number: 1062, Message: "Duplicate entry 'k' for key 'PRIMARY'"}, true, "mysql1062"},
		{engine.MySQL, &mysql.MySQLError{Number: 1452, Message: "Cannot add or update a child row"}, false, "mysql1452"},
		{engine.Postgres, &fakePgError{"23505"}, true, "pg23505"},
		{engine.Postgres, fmt.Errorf("pgx: %w", &fakePgError{"23505"}), true, "pg23505wrapped"},
		{engine.Postgres, &fakePgError{"23503"}, false, "pg23503"},
		{engine.SQLite, &fakeSQLiteError{2067}, true, "sqlite2067"},
		{engine.SQLite, &fakeSQLiteError{1555}, true, "sqlite1555"},
		{engine.SQLite, &fakeSQLiteError{787}, false, "sqlite787"},
	}
	for _, c := range cases {
		for _, opName := range []string{"Create", "CreateWithStateAndSet", "AcquireWithStatesAndSet", "TransitionKeep"} {
			t.Run(c.name+"/"+opName, func(t *testing.T) {
				db, mock := newMock(t)
				l := newMockLease(t, c.d)
				g := mockGrant(t)
				op := mockOp1(t, opName)
				seen := expectOp(t, mock, c.d, op, g, outcome{err: c.err})
				_, tok, err := op.run(context.Background(), l, db, g)
				require.Error(t, err)
				if c.dup || !(strings.HasPrefix(opName, "Create") || strings.HasPrefix(opName, "Acquire")) {
					assert.True(t, engine.TokenIsZero(tok) || engine.SameToken(tok, g.Token), "no new grant on failure")
				} else {
					// Create and Acquire hand back the grant they tried with
					// any error but ErrExists, for a Delete or a Release that
					// gives back what the statement may have taken.
					assert.False(t, engine.TokenIsZero(tok), "the grant it tried")
				}
				assert.Equal(t, c.dup, engine.IsDuplicateKey(err))
				noSecret(t, err, engine.Secret(g.Token), *seen)
				if !c.dup {
					assert.Same(t, c.err, err, "returned as is")
					assert.NotErrorIs(t, err, engine.ErrExists)
					return
				}
				assert.ErrorIs(t, err, engine.ErrExists)
				var de *engine.DuplicateKeyError
				require.ErrorAs(t, err, &de)
				assert.Equal(t, "k", de.Key)
				assert.Same(t, c.err, de.Err)
				assert.ErrorIs(t, err, c.err, "unwraps to the driver error")
				assert.Equal(t, `lease: already exists (key "k"): `+c.err.Error(), err.Error())
				assert.NotErrorIs(t, err, engine.ErrHeld)
			})
		}
	}
}

// TestSQLMockGaleraNonPrimaryNotLost: a Galera node cut off from the
// primary component answers every statement with error 1047 before running
// it. A renewal refused that way says nothing about the lease: it is
// returned as it is, never as ErrLost (the holder keeps trying until its
// trust deadline, and a renewal that reaches a node of the primary
// component succeeds), and it is not one of the errors this package sends
// again by itself.
func TestSQLMockGaleraNonPrimaryNotLost(t *testing.T) {
	nonPrimary := &mysql.MySQLError{Number: 1047, SQLState: [5]byte{'0', '8', 'S', '0', '1'}, Message: "WSREP has not yet prepared node for application use"}
	assert.False(t, engine.IsRetryable(nonPrimary))
	assert.False(t, engine.IsTransient(nonPrimary))
	for _, mp := range []bool{false, true} {
		t.Run(fmt.Sprintf("multi-primary=%v", mp), func(t *testing.T) {
			db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherRegexp))
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			l, err := engine.New[string](engine.MySQL, mockTable, engine.Options{Prepare: engine.PrepareNever, MultiPrimary: mp})
			require.NoError(t, err)
			g := mockGrant(t)
			mock.ExpectExec("UPDATE").WillReturnError(nonPrimary)
			g2, err := l.Renew(context.Background(), db, g, 5*time.Second)
			require.ErrorIs(t, err, nonPrimary)
			assert.NotErrorIs(t, err, engine.ErrLost)
			assert.Equal(t, g, g2, "the grant comes back unchanged")

			// A batch: the node refuses its first statement, whichever
			// that is.
			gs := mockGrants(t, "a", "b")
			mock.MatchExpectationsInOrder(false)
			mock.ExpectBegin().WillReturnError(nonPrimary)
			mock.ExpectExec("UPDATE").WillReturnError(nonPrimary)
			_, errs := engine.RenewMany(context.Background(), l, db, gs, 5*time.Second)
			for i, err := range errs {
				require.ErrorIs(t, err, nonPrimary, "grant %d", i)
				assert.NotErrorIs(t, err, engine.ErrLost, "grant %d", i)
			}
		})
	}
}
