package engine_test

// go-sqlmock tests of RenewMany: the exact SQL of a batch in every
// dialect, and MySQL's paths after a statement that changed fewer rows
// than it was sent, which a single server cannot be made to take on
// demand (a multi-primary node that has not yet applied the holder's own
// write). What the SQL does is proved on real databases (batch_test.go).

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
)

// batchSQL is RenewMany's UPDATE of n grants of mockTable for ttl, and the
// read of which of them still hold, in dialect d.
func batchSQL(d engine.Dialect, n int, ttl time.Duration) (update, read string) {
	q := func(s string) string {
		if d == engine.MySQL {
			return "`" + s + "`"
		}
		return `"` + s + `"`
	}
	table := q("app") + "." + q("lease_item")
	e, k, tok, gen := q("expires_at"), q("item_key"), q("token"), q("generation")
	micros := strconv.FormatInt(ttl.Microseconds(), 10)
	var target, plus1, now string
	switch d {
	case engine.MySQL:
		now = myNow
		target = "(" + myNow + " + INTERVAL " + micros + " MICROSECOND)"
		plus1 = "(" + e + " + INTERVAL 1 MICROSECOND)"
	case engine.Postgres:
		now = pgNow
		target = "(" + pgNow + " + CAST(" + micros + " AS bigint) * INTERVAL '1 microsecond')"
		plus1 = "(" + e + " + CAST(1 AS bigint) * INTERVAL '1 microsecond')"
	default:
		now = liteNow
		target = "(" + liteNow + " + " + micros + ")"
		plus1 = "(" + e + " + 1)"
	}
	keys := make([]string, n)
	triples := make([]string, n)
	for i := range n {
		if d == engine.Postgres {
			keys[i] = "$" + strconv.Itoa(3*i+1)
			triples[i] = "($" + strconv.Itoa(3*i+1) + ", $" + strconv.Itoa(3*i+2) + ", $" + strconv.Itoa(3*i+3) + ")"
			continue
		}
		keys[i], triples[i] = "?", "(?, ?, ?)"
	}
	list := strings.Join(triples, ", ")
	if d == engine.SQLite {
		list = "VALUES " + list
	}
	where := " WHERE " + k + " IN (" + strings.Join(keys, ", ") + ") AND (" + k + ", " + tok + ", " + gen + ") IN (" + list + ")"
	update = "UPDATE " + table + " SET " + e + " = CASE WHEN " + e + " IS NOT NULL AND " + e + " >= " + target +
		" THEN " + plus1 + " ELSE " + target + " END, " + q("updated_at") + " = " + now + where
	if d != engine.MySQL {
		update += " RETURNING " + tok + ", " + gen
	}
	return update, "SELECT " + tok + ", " + gen + " FROM " + table + where
}

// batchArgs are the arguments of batchSQL for gs.
func batchArgs(d engine.Dialect, gs ...engine.Grant[string]) []driver.Value {
	var out []driver.Value
	if d != engine.Postgres {
		for _, g := range gs {
			out = append(out, g.Key)
		}
	}
	for _, g := range gs {
		out = append(out, g.Key, engine.Secret(g.Token), g.Generation)
	}
	return out
}

func mockGrants(t *testing.T, keys ...string) []engine.Grant[string] {
	t.Helper()
	gs := make([]engine.Grant[string], len(keys))
	for i, k := range keys {
		gs[i] = mockGrant(t)
		gs[i].Key = k
		gs[i].Generation = int64(i + 2)
	}
	return gs
}

// heldRows is what the read of still-held grants answers: gs.
func heldRows(gs ...engine.Grant[string]) *sqlmock.Rows {
	rows := sqlmock.NewRows([]string{"token", "generation"})
	for _, g := range gs {
		rows.AddRow(engine.Secret(g.Token), g.Generation)
	}
	return rows
}

// expectBatch registers MySQL's batch UPDATE of gs in its READ COMMITTED
// transaction, changing n rows.
func expectBatch(mock sqlmock.Sqlmock, ttl time.Duration, n int64, gs ...engine.Grant[string]) {
	up, _ := batchSQL(engine.MySQL, len(gs), ttl)
	mock.ExpectBegin()
	mock.ExpectExec(up).WithArgs(batchArgs(engine.MySQL, gs...)...).WillReturnResult(sqlmock.NewResult(0, n))
	mock.ExpectCommit()
}

// expectHeld registers the read of which of gs still hold, under
// wsrep_sync_wait when causal, answering found.
func expectHeld(mock sqlmock.Sqlmock, ttl time.Duration, causal bool, gs []engine.Grant[string], found ...engine.Grant[string]) {
	_, rd := batchSQL(engine.MySQL, len(gs), ttl)
	if causal {
		rd = engine.SyncWait(rd)
	}
	mock.ExpectQuery(rd).WithArgs(batchArgs(engine.MySQL, gs...)...).WillReturnRows(heldRows(found...))
}

// TestSQLMockRenewManyStatement pins RenewMany's statement in every
// dialect: the key list, then (key, token, generation) per grant, and on
// PostgreSQL and SQLite the token and generation of each renewed row back.
func TestSQLMockRenewManyStatement(t *testing.T) {
	const ttl = 5 * time.Second
	for _, d := range mockDialects {
		t.Run(d.String(), func(t *testing.T) {
			db, mock := newMock(t)
			l := newMockLease(t, d)
			gs := mockGrants(t, "a", "b", "c")
			up, _ := batchSQL(d, 3, ttl)
			if d == engine.MySQL {
				expectBatch(mock, ttl, 3, gs...)
			} else {
				mock.ExpectQuery(up).WithArgs(batchArgs(d, gs...)...).WillReturnRows(heldRows(gs[0], gs[2]))
			}
			sent := time.Now()
			out, errs := engine.RenewMany(context.Background(), l, db, gs, ttl)
			assert.NoError(t, errs[0])
			assert.False(t, out[0].Deadline.Before(sent.Add(ttl-ttl/10-engine.Resolution(l))))
			if d == engine.MySQL {
				assert.NoError(t, errs[1])
			} else {
				assert.ErrorIs(t, errs[1], engine.ErrLost, "not handed back: lost")
			}
			assert.NoError(t, errs[2])
		})
	}
}

// TestSQLMockRenewManyMultiPrimaryNotProvedByRead: on a multi-primary
// cluster a batch UPDATE that changed fewer rows than it was sent may have
// missed a row its node had not yet caught up on. A read that finds the
// token is no proof of a renewal: no statement renewed the row. Every
// UPDATE here changes one row of two and every read finds both tokens;
// the grant no statement can be shown to have renewed must not be
// reported renewed. (The statements are matched loosely and out of order:
// the point is the answer, whatever the statements were.)
func TestSQLMockRenewManyMultiPrimaryNotProvedByRead(t *testing.T) {
	const ttl = 5 * time.Second
	db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherRegexp))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	mock.MatchExpectationsInOrder(false)
	l, err := engine.New[string](engine.MySQL, mockTable, engine.Options{Prepare: engine.PrepareNever, MultiPrimary: true})
	require.NoError(t, err)
	gs := mockGrants(t, "a", "b")
	for range 8 {
		mock.ExpectBegin()
		mock.ExpectCommit()
		mock.ExpectExec("UPDATE").WillReturnResult(sqlmock.NewResult(0, 1))
		mock.ExpectQuery("SELECT").WillReturnRows(heldRows(gs...))
	}
	_, errs := engine.RenewMany(context.Background(), l, db, gs, ttl)
	require.Error(t, errs[0], "never more than one row changed: not both renewed")
	require.Error(t, errs[1], "never more than one row changed: not both renewed")
	assert.ErrorIs(t, errs[0], engine.ErrLost)
	assert.ErrorIs(t, errs[1], engine.ErrLost)
}

// TestSQLMockRenewManyMultiPrimaryCausalRerun pins the causal re-run with
// Options.MultiPrimary: when the first UPDATE changed fewer rows than it
// was sent, one connection reads under wsrep_sync_wait which grants still
// hold (the wait applies: the read runs outside a transaction), then, on
// that same connection, now caught up, renews those again in its READ
// COMMITTED transaction (inside which MariaDB would not wait); a grant
// counts as renewed only when that statement changed every row it was
// sent.
func TestSQLMockRenewManyMultiPrimaryCausalRerun(t *testing.T) {
	const ttl = 5 * time.Second
	newMP := func(t *testing.T, res time.Duration) *engine.Lease[string] {
		l, err := engine.New[string](engine.MySQL, mockTable, engine.Options{Prepare: engine.PrepareNever, MultiPrimary: true, ExpiryResolution: res})
		require.NoError(t, err)
		return l
	}
	t.Run("caught up", func(t *testing.T) {
		db, mock := newMock(t)
		gs := mockGrants(t, "a", "b")
		expectBatch(mock, ttl, 1, gs...)
		expectHeld(mock, ttl, true, gs, gs...)
		expectBatch(mock, ttl, 2, gs...)
		_, errs := engine.RenewMany(context.Background(), newMP(t, 0), db, gs, ttl)
		assert.NoError(t, errs[0])
		assert.NoError(t, errs[1], "renewed by the causal re-run")
	})
	t.Run("one lost", func(t *testing.T) {
		db, mock := newMock(t)
		gs := mockGrants(t, "a", "b", "c")
		expectBatch(mock, ttl, 1, gs...)
		expectHeld(mock, ttl, true, gs, gs[0], gs[2])
		expectBatch(mock, ttl, 2, gs[0], gs[2])
		_, errs := engine.RenewMany(context.Background(), newMP(t, 0), db, gs, ttl)
		assert.NoError(t, errs[0])
		assert.ErrorIs(t, errs[1], engine.ErrLost, "gone by the causal read")
		assert.NoError(t, errs[2])
	})
	t.Run("still short", func(t *testing.T) {
		// The causal re-run changed one row of two while both still hold:
		// on a microsecond column every renewal changes its row, so one
		// was not renewed, and which one is unknown: both lost.
		db, mock := newMock(t)
		gs := mockGrants(t, "a", "b")
		expectBatch(mock, ttl, 1, gs...)
		expectHeld(mock, ttl, true, gs, gs...)
		expectBatch(mock, ttl, 1, gs...)
		expectHeld(mock, ttl, true, gs, gs...)
		_, errs := engine.RenewMany(context.Background(), newMP(t, 0), db, gs, ttl)
		assert.ErrorIs(t, errs[0], engine.ErrLost)
		assert.ErrorIs(t, errs[1], engine.ErrLost)
	})
	t.Run("coarse column", func(t *testing.T) {
		// A declared coarse column: a renewal in the same tick leaves its
		// row unchanged, so a grant still held after the causal re-run
		// counts as renewed by it — and only after it.
		db, mock := newMock(t)
		gs := mockGrants(t, "a", "b", "c")
		expectBatch(mock, ttl, 0, gs...)
		expectHeld(mock, ttl, true, gs, gs[0], gs[1])
		expectBatch(mock, ttl, 0, gs[0], gs[1])
		expectHeld(mock, ttl, true, gs[:2], gs[0], gs[1])
		_, errs := engine.RenewMany(context.Background(), newMP(t, time.Second), db, gs, ttl)
		assert.NoError(t, errs[0])
		assert.NoError(t, errs[1])
		assert.ErrorIs(t, errs[2], engine.ErrLost)
	})
}

// poolOnly is a pool that cannot lend one of its connections.
type poolOnly struct{ db *sql.DB }

func (p poolOnly) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return p.db.ExecContext(ctx, q, args...)
}

func (p poolOnly) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return p.db.QueryContext(ctx, q, args...)
}

func (p poolOnly) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return p.db.QueryRowContext(ctx, q, args...)
}

func (p poolOnly) BeginTx(ctx context.Context, o *sql.TxOptions) (*sql.Tx, error) {
	return p.db.BeginTx(ctx, o)
}

func (p poolOnly) PrepareContext(ctx context.Context, q string) (*sql.Stmt, error) {
	return p.db.PrepareContext(ctx, q)
}

func (p poolOnly) Stats() sql.DBStats { return p.db.Stats() }

// TestSQLMockRenewManyMultiPrimaryNoConn: on a pool that cannot lend a
// connection the causal re-run is sent in autocommit under
// wsrep_sync_wait, where the wait applies.
func TestSQLMockRenewManyMultiPrimaryNoConn(t *testing.T) {
	const ttl = 5 * time.Second
	db, mock := newMock(t)
	l, err := engine.New[string](engine.MySQL, mockTable, engine.Options{Prepare: engine.PrepareNever, MultiPrimary: true})
	require.NoError(t, err)
	gs := mockGrants(t, "a", "b")
	expectBatch(mock, ttl, 1, gs...)
	expectHeld(mock, ttl, true, gs, gs...)
	up, _ := batchSQL(engine.MySQL, 2, ttl)
	mock.ExpectExec(engine.SyncWait(up)).WithArgs(batchArgs(engine.MySQL, gs...)...).WillReturnResult(sqlmock.NewResult(0, 2))
	_, errs := engine.RenewMany(context.Background(), l, poolOnly{db}, gs, ttl)
	assert.NoError(t, errs[0])
	assert.NoError(t, errs[1])
}

// TestSQLMockRenewManyMySQLShort: on a single server, when fewer rows
// changed than were sent, the read finds the lost grants, and the others
// are proved by a second statement that changes every row it is sent; a
// declared coarse column takes the read's word (a single server's UPDATE
// saw every committed write).
func TestSQLMockRenewManyMySQLShort(t *testing.T) {
	const ttl = 5 * time.Second
	t.Run("microsecond column", func(t *testing.T) {
		db, mock := newMock(t)
		gs := mockGrants(t, "a", "b", "c")
		expectBatch(mock, ttl, 2, gs...)
		expectHeld(mock, ttl, false, gs, gs[0], gs[2])
		expectBatch(mock, ttl, 2, gs[0], gs[2])
		_, errs := engine.RenewMany(context.Background(), newMockLease(t, engine.MySQL), db, gs, ttl)
		assert.NoError(t, errs[0])
		assert.ErrorIs(t, errs[1], engine.ErrLost)
		assert.NoError(t, errs[2])
	})
	t.Run("coarse column", func(t *testing.T) {
		db, mock := newMock(t)
		l, err := engine.New[string](engine.MySQL, mockTable, engine.Options{Prepare: engine.PrepareNever, ExpiryResolution: time.Second})
		require.NoError(t, err)
		gs := mockGrants(t, "a", "b", "c")
		expectBatch(mock, ttl, 0, gs...)
		expectHeld(mock, ttl, false, gs, gs[0], gs[2])
		_, errs := engine.RenewMany(context.Background(), l, db, gs, ttl)
		assert.NoError(t, errs[0])
		assert.ErrorIs(t, errs[1], engine.ErrLost)
		assert.NoError(t, errs[2])
	})
}
