package engine_test

// go-sqlmock tests: they pin the exact SQL text and arguments of every
// operation in every dialect, and drive the error paths that a real server
// cannot be made to produce on demand (driver errors, duplicate-key errors
// of each driver, MySQL's matched-but-unchanged OK packet). They complement
// the real-database tests (conformance_test.go, mysql_test.go); they never
// replace them: that the SQL pinned here does the right thing is proved
// there. This file holds the mock harness and the statement tests; the
// pinned statements and arguments are in sqlmock_ops_test.go, the error
// paths in sqlmock_errors_test.go.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
)

// mockTok stands for the token in an argument list: the grant's token, or, for
// an operation that draws a fresh one, any canonical UUID — the same one at
// every position, and the one the returned grant carries.
type tokenMarker struct{}

var mockTok = tokenMarker{}

// tokenArg matches the token argument. With want empty it captures the
// first value it sees and then requires every later position to repeat it.
type tokenArg struct {
	want string
	got  *string
}

func (a tokenArg) Match(v driver.Value) bool {
	s, ok := v.(string)
	if !ok {
		return false
	}
	if a.want != "" {
		return s == a.want
	}
	if _, err := engine.ParseToken(s); err != nil {
		return false
	}
	if *a.got == "" {
		*a.got = s
	}
	return *a.got == s
}

func mockArgs(args []any, tok tokenArg) []driver.Value {
	out := make([]driver.Value, len(args))
	for i, a := range args {
		if a == mockTok {
			out[i] = tok
			continue
		}
		out[i] = a
	}
	return out
}

// exactSQL is sqlmock.QueryMatcherEqual made byte-exact: QueryMatcherEqual
// alone folds runs of whitespace.
var exactSQL = sqlmock.QueryMatcherFunc(func(expected, actual string) error {
	if err := sqlmock.QueryMatcherEqual.Match(expected, actual); err != nil {
		return err
	}
	if expected != actual {
		return fmt.Errorf("actual sql %q differs from expected %q in whitespace", actual, expected)
	}
	return nil
})

// Leases on a mock set Options.SkipCheck: the first-use check would be a
// statement the mock does not expect (TestSQLMockCheckStatement pins it).

// newMock returns a sqlmock database matching SQL text exactly and in
// order, checked for unmet expectations at cleanup.
func newMock(t *testing.T) (*sql.DB, sqlmock.Sqlmock) {
	t.Helper()
	db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(exactSQL))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	t.Cleanup(func() { assert.NoError(t, mock.ExpectationsWereMet()) })
	return db, mock
}

func newMockLease(t *testing.T, d engine.Dialect) *engine.Lease[string] {
	t.Helper()
	l, err := engine.New[string](d, mockTable, engine.Options{Prepare: engine.PrepareNever, SkipCheck: true})
	require.NoError(t, err)
	return l
}

func mockGrant(t *testing.T) engine.Grant[string] {
	t.Helper()
	tok, err := engine.NewToken()
	require.NoError(t, err)
	return engine.Grant[string]{Key: "k", Holder: "alice", Token: tok, Generation: 2, TTL: 5 * time.Second}
}

// outcome is how the mocked database answers a statement.
type outcome struct {
	gen       int64 // the generation returned (RETURNING, LAST_INSERT_ID, or SELECT)
	noMatch   bool  // no row matched: 0 rows affected and insert id 0 on MySQL, no row elsewhere
	unchanged bool  // MySQL only: matched but unchanged (0 rows affected, insert id = gen)
	err       error // the driver error
	status    []driver.Value
}

// expectOp registers op's statement with the answer o and returns a
// pointer to the token seen in its arguments.
func expectOp(t *testing.T, mock sqlmock.Sqlmock, d engine.Dialect, op mockOp, g engine.Grant[string], o outcome) *string {
	t.Helper()
	q, ok := op.sql[d].(string)
	require.True(t, ok, "%s: no SQL for %s", op.name, d)
	seen := new(string)
	tok := tokenArg{got: seen}
	if !op.freshTok {
		tok.want = engine.Secret(g.Token)
		*seen = engine.Secret(g.Token)
	}
	args := mockArgs(op.args[d].([]any), tok)
	exec := op.kind == kindInsert || op.kind == kindRelease || (op.kind == kindUpdate && d == engine.MySQL)
	if exec {
		e := mock.ExpectExec(q).WithArgs(args...)
		switch {
		case o.err != nil:
			e.WillReturnError(o.err)
		case o.noMatch:
			e.WillReturnResult(sqlmock.NewResult(0, 0))
		case o.unchanged:
			e.WillReturnResult(sqlmock.NewResult(o.gen, 0))
		default:
			e.WillReturnResult(sqlmock.NewResult(o.gen, 1))
		}
		return seen
	}
	e := mock.ExpectQuery(q).WithArgs(args...)
	if o.err != nil {
		e.WillReturnError(o.err)
		return seen
	}
	if op.kind == kindInspect {
		rows := sqlmock.NewRows([]string{"holder", "generation", "state", "held", "micros"})
		if !o.noMatch {
			rows.AddRow(o.status...)
		}
		e.WillReturnRows(rows)
		return seen
	}
	rows := sqlmock.NewRows([]string{"generation"})
	if !o.noMatch {
		rows.AddRow(o.gen)
	}
	e.WillReturnRows(rows)
	return seen
}

// expectInspect registers the Inspect read that follows a failed acquire.
func expectInspect(t *testing.T, mock sqlmock.Sqlmock, d engine.Dialect, o outcome) {
	t.Helper()
	expectOp(t, mock, d, mockOp1(t, "Inspect"), engine.Grant[string]{}, o)
}

func noSecret(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range secrets {
		if s != "" {
			assert.NotContains(t, err.Error(), s, "the token leaks into the error text")
			assert.NotContains(t, fmt.Sprintf("%+v", err), s, "the token leaks into the error text")
		}
	}
}

// TestSQLMockStatements pins the exact SQL text and arguments of every
// operation in every dialect, and that each is one statement.
func TestSQLMockStatements(t *testing.T) {
	for _, d := range mockDialects {
		for _, op := range mockOpsFilled() {
			t.Run(d.String()+"/"+op.name, func(t *testing.T) {
				ctx := context.Background()
				db, mock := newMock(t)
				l := newMockLease(t, d)
				g := mockGrant(t)
				seen := expectOp(t, mock, d, op, g, outcome{gen: 3, status: []driver.Value{"bob", int64(4), "processing", int64(1), int64(1500000)}})
				gen, tok, err := op.run(ctx, l, db, g)
				require.NoError(t, err)
				switch {
				case op.kind == kindInspect:
					assert.Equal(t, int64(4), gen)
				case op.name == "Create" || op.name == "CreateWithStateAndSet":
					assert.Equal(t, int64(1), gen, "a created row is generation 1")
				case gen != -1:
					assert.Equal(t, int64(3), gen, "the generation is the one the database returned")
				}
				if op.freshTok {
					require.NotEmpty(t, *seen)
					assert.Equal(t, *seen, engine.Secret(tok), "the grant carries the token that was sent")
					assert.NotEqual(t, engine.Secret(g.Token), engine.Secret(tok))
				} else if !engine.TokenIsZero(tok) {
					assert.True(t, engine.SameToken(tok, g.Token), "the grant keeps its token")
				}
			})
		}
	}
}

// TestSQLMockInspectStatus checks how Inspect reads its row.
func TestSQLMockInspectStatus(t *testing.T) {
	for _, d := range mockDialects {
		t.Run(d.String(), func(t *testing.T) {
			ctx := context.Background()
			db, mock := newMock(t)
			l := newMockLease(t, d)
			expectInspect(t, mock, d, outcome{status: []driver.Value{"bob", int64(4), "processing", int64(1), int64(1500000)}})
			st, err := l.Inspect(ctx, db, "k")
			require.NoError(t, err)
			assert.Equal(t, engine.Snapshot{Holder: "bob", Generation: 4, State: "processing", Held: true, Remaining: 1500 * time.Millisecond}, st)

			// Expired: not held, and no remaining time even though the stored
			// expiry difference is negative.
			expectInspect(t, mock, d, outcome{status: []driver.Value{"bob", int64(4), "processing", int64(0), int64(-2000)}})
			st, err = l.Inspect(ctx, db, "k")
			require.NoError(t, err)
			assert.Equal(t, engine.Snapshot{Holder: "bob", Generation: 4, State: "processing"}, st)

			expectInspect(t, mock, d, outcome{noMatch: true})
			_, err = l.Inspect(ctx, db, "k")
			assert.ErrorIs(t, err, engine.ErrNotFound)
			assert.EqualError(t, err, `lease: not found (key "k")`)
		})
	}
}

// TestSQLMockIntegerKey pins how an integer key is sent.
func TestSQLMockIntegerKey(t *testing.T) {
	db, mock := newMock(t)
	l, err := engine.New[int32](engine.Postgres, mockTable, engine.Options{SkipCheck: true})
	require.NoError(t, err)
	mock.ExpectQuery(mockOp1(t, "Acquire").sql[engine.Postgres].(string)).
		WithArgs(int64(5000000), tokenArg{got: new(string)}, "alice", int64(42)).
		WillReturnRows(sqlmock.NewRows([]string{"generation"}).AddRow(int64(9)))
	g, err := l.Acquire(context.Background(), db, 42, "alice", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, int64(9), g.Generation)
	assert.Equal(t, int32(42), g.Key)
}

// TestSQLMockValidationSendsNothing: rejected input reaches no database (the
// mock has no expectations, so any statement would fail the test).
func TestSQLMockValidationSendsNothing(t *testing.T) {
	ctx := context.Background()
	noState := engine.MustTable("plain", engine.Columns{Key: "id", Holder: "h", Token: "t", ExpiresAt: "e", Generation: "g"})
	for _, d := range mockDialects {
		t.Run(d.String(), func(t *testing.T) {
			db, _ := newMock(t)
			l, err := engine.New[string](d, noState, engine.Options{SafetyMargin: time.Second, SkipCheck: true})
			require.NoError(t, err)
			g := mockGrant(t)
			errs := map[string]error{}
			_, errs["acquire InStates without a State column"] = l.AcquireWith(ctx, db, "k", "a", 5*time.Second, engine.AcquireOptions{InStates: []string{"queued"}})
			_, errs["acquire SetState without a State column"] = l.AcquireWith(ctx, db, "k", "a", 5*time.Second, engine.AcquireOptions{SetState: "x"})
			_, errs["transition To without a State column"] = l.Transition(ctx, db, g, engine.ChangeOptions{To: "done"})
			_, errs["create State without a State column"] = l.Create(ctx, db, "k", "a", 5*time.Second, engine.CreateOptions{State: "x"})
			errs["ensure State without a State column"] = l.Ensure(ctx, db, "k", engine.CreateOptions{State: "x"})
			_, errs["ttl equal to the margin"] = l.Acquire(ctx, db, "k", "a", time.Second)
			_, errs["renew ttl below the margin"] = l.Renew(ctx, db, g, 999*time.Millisecond)
			_, errs["transition keep without ttl"] = l.Transition(ctx, db, g, engine.ChangeOptions{Keep: true})
			_, errs["set a lease column, other case"] = l.AcquireWith(ctx, db, "k", "a", 5*time.Second, engine.AcquireOptions{Set: []engine.Assignment{engine.Set("T", "x")}})
			for name, err := range errs {
				var ve *engine.ValidationError
				assert.ErrorAs(t, err, &ve, name)
				noSecret(t, err, engine.Secret(g.Token))
			}
		})
	}
}

// TestSQLMockTokenIsSent is a guard on the test itself: the
// secret really is sent (so the "not in error text" checks above check
// something).
func TestSQLMockTokenIsSent(t *testing.T) {
	db, mock := newMock(t)
	l := newMockLease(t, engine.MySQL)
	g := mockGrant(t)
	var got []string
	op := mockOp1(t, "Release")
	mock.ExpectExec(op.sql[engine.MySQL].(string)).WithArgs("k", argFunc(func(v driver.Value) bool {
		s, _ := v.(string)
		got = append(got, s)
		return true
	}), g.Generation).WillReturnResult(sqlmock.NewResult(0, 0))
	err := l.Release(context.Background(), db, g)
	require.ErrorIs(t, err, engine.ErrLost)
	require.Equal(t, []string{engine.Secret(g.Token)}, got)
	assert.False(t, strings.Contains(err.Error(), engine.Secret(g.Token)))
}

type argFunc func(driver.Value) bool

func (f argFunc) Match(v driver.Value) bool { return f(v) }

// TestSQLMockPreparedOnce: with the default options a Lease on SQLite or
// MySQL prepares a statement once per pool and reuses it; inside a
// transaction it sends text; on PostgreSQL it never prepares.
func TestSQLMockPreparedOnce(t *testing.T) {
	for _, d := range mockDialects {
		t.Run(d.String(), func(t *testing.T) {
			db, mock := newMock(t)
			l, err := engine.New[string](d, mockTable, engine.Options{SkipCheck: true})
			require.NoError(t, err)
			g := mockGrant(t)
			q := mockOp1(t, "Verify").sql[d].(string)
			if d != engine.SQLite { // PrepareAuto prepares on SQLite only
				for range 2 {
					mock.ExpectQuery(q).WithArgs("k", engine.Secret(g.Token), g.Generation).WillReturnRows(sqlmock.NewRows([]string{"generation"}).AddRow(int64(3)))
				}
			} else {
				p := mock.ExpectPrepare(q).WillBeClosed() // by l.Close below
				for range 2 {
					p.ExpectQuery().WithArgs("k", engine.Secret(g.Token), g.Generation).WillReturnRows(sqlmock.NewRows([]string{"generation"}).AddRow(int64(3)))
				}
			}
			for range 2 {
				gen, err := engine.Verify(context.Background(), l, db, g, false)
				require.NoError(t, err)
				assert.Equal(t, int64(3), gen)
			}
			// In a transaction: text, never the pool's prepared statement.
			mock.ExpectBegin()
			mock.ExpectQuery(q).WithArgs("k", engine.Secret(g.Token), g.Generation).WillReturnRows(sqlmock.NewRows([]string{"generation"}).AddRow(int64(3)))
			mock.ExpectCommit()
			tx, err := db.Begin()
			require.NoError(t, err)
			_, err = engine.Verify(context.Background(), l, tx, g, false)
			require.NoError(t, err)
			require.NoError(t, tx.Commit())
			require.NoError(t, l.Close())

			// Closed: text from now on, nothing prepared again.
			mock.ExpectQuery(q).WithArgs("k", engine.Secret(g.Token), g.Generation).WillReturnRows(sqlmock.NewRows([]string{"generation"}).AddRow(int64(3)))
			_, err = engine.Verify(context.Background(), l, db, g, false)
			require.NoError(t, err)
			require.NoError(t, l.Close(), "a second Close is a no-op")
		})
	}
}
