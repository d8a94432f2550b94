package engine_test

// go-sqlmock tests of Joint and of the end of RunFenced: the exact joint
// statements per dialect, what follows a MySQL joint UPDATE that did not
// change every row, victims, and driver errors. That these statements do
// the right thing on real servers is proved by the conformance suite's
// joint cases and joint_count_test.go.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
)

// The joint tests' other tables: one mapped with other column names and no
// updated_at, one made like mockTable.
var (
	mockOther = engine.MustTable("app.lease_other", engine.Columns{
		Key: "id", Holder: "holder", Token: "token", ExpiresAt: "expires_at", Generation: "gen", State: "status",
	})
	mockThird = engine.MustTable("app.third", engine.Columns{
		Key: "item_key", Holder: "holder", Token: "token", ExpiresAt: "expires_at",
		Generation: "generation", State: "state", UpdatedAt: "updated_at",
	})
)

// jointMock is three leases on a mock and a grant of each: a on
// app.lease_item (key k, generation 2), b on app.lease_other (r, 7), c on
// app.third (c, 4), all with one token.
type jointMock struct {
	d       engine.Dialect
	l, o, t *engine.Lease[string]
	a, b, c engine.Grant[string]
	tok     string
}

func newJointMock(t *testing.T, d engine.Dialect, opts engine.Options) jointMock {
	t.Helper()
	opts.Prepare, opts.SkipCheck = engine.PrepareNever, true
	j := jointMock{d: d}
	for _, x := range []struct {
		l  **engine.Lease[string]
		tb engine.Table
	}{{&j.l, mockTable}, {&j.o, mockOther}, {&j.t, mockThird}} {
		l, err := engine.New[string](d, x.tb, opts)
		require.NoError(t, err)
		*x.l = l
	}
	g := mockGrant(t)
	j.tok = engine.Secret(g.Token)
	j.a = g
	j.b, j.c = g, g
	j.b.Key, j.b.Generation = "r", 7
	j.c.Key, j.c.Generation = "c", 4
	return j
}

var mockDone = engine.ChangeOptions{From: []string{"processing"}, To: "done", Set: []engine.Assignment{engine.Set("note", "n")}}

// ops are a confirmation of a, a transition of b, a release of c.
func (j jointMock) ops() []engine.JointOp {
	return []engine.JointOp{engine.ConfirmOp(j.l, j.a), engine.TransitionOp(j.o, j.b, mockDone), engine.ReleaseOp(j.t, j.c)}
}

// jointSQL and jointArgs are the joint statement of j.ops().
func (j jointMock) jointSQL() (string, []driver.Value) {
	tok := j.tok
	if j.d == engine.MySQL {
		return "UPDATE `app`.`lease_item` AS j0, `app`.`lease_other` AS j1, `app`.`third` AS j2 SET " +
				"j0.`expires_at` = CASE WHEN j0.`token` = ? AND j0.`expires_at` IS NOT NULL AND j0.`expires_at` >= (" + myNow + " + INTERVAL ? MICROSECOND) " +
				"THEN (j0.`expires_at` + INTERVAL 1 MICROSECOND) ELSE (" + myNow + " + INTERVAL ? MICROSECOND) END, j0.`updated_at` = " + myNow + ", " +
				"j1.`expires_at` = NULL, j1.`token` = NULL, j1.`holder` = NULL, j1.`status` = ?, j1.`note` = ?, " +
				"j2.`expires_at` = NULL, j2.`token` = NULL, j2.`holder` = NULL, j2.`updated_at` = " + myNow + " " +
				"WHERE (j0.`item_key` = ? AND j0.`token` = ? AND j0.`generation` = ? AND j0.`expires_at` > " + myNow + ") " +
				"AND (j1.`id` = ? AND j1.`token` = ? AND j1.`gen` = ? AND j1.`status` IN (?)) " +
				"AND (j2.`item_key` = ? AND j2.`token` = ? AND j2.`generation` = ?)",
			[]driver.Value{tok, int64(5000000), int64(5000000), "done", "n", "k", tok, int64(2), "r", tok, int64(7), "processing", "c", tok, int64(4)}
	}
	return `WITH j0 AS (UPDATE "app"."lease_item" SET "expires_at" = CASE WHEN "token" = $1 AND "expires_at" IS NOT NULL AND "expires_at" >= (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') ` +
			`THEN ("expires_at" + CAST(1 AS bigint) * INTERVAL '1 microsecond') ELSE (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') END, "updated_at" = ` + pgNow + ` ` +
			`WHERE "item_key" = $3 AND "token" = $1 AND "generation" = $4 AND "expires_at" > ` + pgNow + ` RETURNING "generation"), ` +
			`j1 AS (UPDATE "app"."lease_other" SET "expires_at" = NULL, "token" = NULL, "holder" = NULL, "status" = $5, "note" = $6 ` +
			`WHERE "id" = $7 AND "token" = $8 AND "gen" = $9 AND "status" IN ($10) RETURNING "gen"), ` +
			`j2 AS (UPDATE "app"."third" SET "expires_at" = NULL, "token" = NULL, "holder" = NULL, "updated_at" = ` + pgNow + ` ` +
			`WHERE "item_key" = $11 AND "token" = $12 AND "generation" = $13 RETURNING "generation") ` +
			`SELECT (SELECT "generation" FROM j0), (SELECT "gen" FROM j1), (SELECT "generation" FROM j2)`,
		[]driver.Value{tok, int64(5000000), "k", int64(2), "done", "n", "r", tok, int64(7), "processing", "c", tok, int64(4)}
}

// expectJoint registers the joint statement: on MySQL answered with
// changed rows, on PostgreSQL with one generation per write (nil: NULL,
// the write matched no row).
func (j jointMock) expectJoint(mock sqlmock.Sqlmock, changed int64, gens []driver.Value, err error) {
	q, args := j.jointSQL()
	if j.d == engine.MySQL {
		e := mock.ExpectExec(q).WithArgs(args...)
		if err != nil {
			e.WillReturnError(err)
			return
		}
		e.WillReturnResult(sqlmock.NewResult(0, changed))
		return
	}
	e := mock.ExpectQuery(q).WithArgs(args...)
	if err != nil {
		e.WillReturnError(err)
		return
	}
	e.WillReturnRows(sqlmock.NewRows([]string{"g0", "g1", "g2"}).AddRow(gens...))
}

// The lone statements of j.ops() on MySQL, sent after a joint UPDATE that
// did not change every row.
const (
	myConfirmA = "UPDATE `app`.`lease_item` SET `generation` = LAST_INSERT_ID(`generation`), " +
		"`expires_at` = CASE WHEN `token` = ? AND `expires_at` IS NOT NULL AND `expires_at` >= (" + myNow + " + INTERVAL ? MICROSECOND) " +
		"THEN (`expires_at` + INTERVAL 1 MICROSECOND) ELSE (" + myNow + " + INTERVAL ? MICROSECOND) END, " +
		"`updated_at` = " + myNow + " WHERE `item_key` = ? AND `token` = ? AND `generation` = ? AND `expires_at` > " + myNow
	myTransitionB = "UPDATE `app`.`lease_other` SET `gen` = LAST_INSERT_ID(`gen`), `expires_at` = NULL, `token` = NULL, `holder` = NULL, " +
		"`status` = ?, `note` = ? WHERE `id` = ? AND `token` = ? AND `gen` = ? AND `status` IN (?)"
	myConfirmB = "UPDATE `app`.`lease_other` SET `gen` = LAST_INSERT_ID(`gen`), " +
		"`expires_at` = CASE WHEN `token` = ? AND `expires_at` IS NOT NULL AND `expires_at` >= (" + myNow + " + INTERVAL ? MICROSECOND) " +
		"THEN (`expires_at` + INTERVAL 1 MICROSECOND) ELSE (" + myNow + " + INTERVAL ? MICROSECOND) END " +
		"WHERE `id` = ? AND `token` = ? AND `gen` = ? AND `expires_at` > " + myNow
	myTransitionC = "UPDATE `app`.`third` SET `generation` = LAST_INSERT_ID(`generation`), `expires_at` = NULL, `token` = NULL, `holder` = NULL, " +
		"`state` = ?, `note` = ?, `updated_at` = " + myNow + " WHERE `item_key` = ? AND `token` = ? AND `generation` = ? AND `state` IN (?)"
	myReleaseC = "UPDATE `app`.`third` SET `generation` = LAST_INSERT_ID(`generation`), `expires_at` = NULL, `token` = NULL, `holder` = NULL, " +
		"`updated_at` = " + myNow + " WHERE `item_key` = ? AND `token` = ? AND `generation` = ?"
)

// expectAlone registers the lone statements on MySQL; matched[i] says
// whether write i matches its row.
func (j jointMock) expectAlone(mock sqlmock.Sqlmock, causal bool, matched ...bool) {
	stmts := []struct {
		q    string
		args []driver.Value
		gen  int64
	}{
		{myConfirmA, []driver.Value{j.tok, int64(5000000), int64(5000000), "k", j.tok, int64(2)}, 2},
		{myTransitionB, []driver.Value{"done", "n", "r", j.tok, int64(7), "processing"}, 7},
		{myReleaseC, []driver.Value{"c", j.tok, int64(4)}, 4},
	}
	for i, s := range stmts {
		res := sqlmock.NewResult(s.gen, 1)
		if !matched[i] {
			res = sqlmock.NewResult(0, 0)
		}
		mock.ExpectExec(s.q).WithArgs(s.args...).WillReturnResult(res)
		if !matched[i] && causal {
			mock.ExpectExec("SET STATEMENT wsrep_sync_wait=15 FOR " + s.q).WithArgs(s.args...).WillReturnResult(res)
		}
	}
}

// TestSQLMockJointStatement pins the joint statement of a confirmation, a
// transition and a release on three tables: one multi-table UPDATE on
// MySQL, one WITH on PostgreSQL, answered by the rows changed or one
// generation per write.
func TestSQLMockJointStatement(t *testing.T) {
	for _, d := range []engine.Dialect{engine.MySQL, engine.Postgres} {
		t.Run(d.String(), func(t *testing.T) {
			db, mock := newMock(t)
			j := newJointMock(t, d, engine.Options{})
			j.expectJoint(mock, 3, []driver.Value{int64(2), int64(7), int64(4)}, nil)
			assert.Equal(t, []error{nil, nil, nil}, engine.Joint(context.Background(), db, j.ops()...))
		})
	}
}

// TestSQLMockJointSQLiteOneByOne: SQLite has no statement that writes
// several tables: each write is its lone statement, in order.
func TestSQLMockJointSQLiteOneByOne(t *testing.T) {
	db, mock := newMock(t)
	j := newJointMock(t, engine.SQLite, engine.Options{})
	mock.ExpectQuery(mockOp1(t, "Confirm").sql[engine.SQLite].(string)).
		WithArgs(j.tok, int64(5000000), int64(5000000), "k", j.tok, int64(2)).
		WillReturnRows(sqlmock.NewRows([]string{"generation"}).AddRow(int64(2)))
	mock.ExpectQuery(`UPDATE "app"."lease_other" SET "expires_at" = NULL, "token" = NULL, "holder" = NULL, "status" = ?, "note" = ? `+
		`WHERE "id" = ? AND "token" = ? AND "gen" = ? AND "status" IN (?) RETURNING "gen"`).
		WithArgs("done", "n", "r", j.tok, int64(7), "processing").
		WillReturnRows(sqlmock.NewRows([]string{"gen"}))
	mock.ExpectExec(`UPDATE "app"."third" SET "expires_at" = NULL, "token" = NULL, "holder" = NULL, "updated_at" = `+liteNow+` `+
		`WHERE "item_key" = ? AND "token" = ? AND "generation" = ?`).
		WithArgs("c", j.tok, int64(4)).
		WillReturnResult(sqlmock.NewResult(0, 1))
	errs := engine.Joint(context.Background(), db, j.ops()...)
	assert.NoError(t, errs[0])
	assert.ErrorIs(t, errs[1], engine.ErrLost)
	assert.NoError(t, errs[2])
}

// TestSQLMockJointPostgresEachOnItsOwn: a NULL generation is that write's
// loss; the others were made in the same statement.
func TestSQLMockJointPostgresEachOnItsOwn(t *testing.T) {
	db, mock := newMock(t)
	j := newJointMock(t, engine.Postgres, engine.Options{})
	j.expectJoint(mock, 0, []driver.Value{int64(2), nil, int64(4)}, nil)
	errs := engine.Joint(context.Background(), db, j.ops()...)
	assert.NoError(t, errs[0])
	var le *engine.LostError
	require.ErrorAs(t, errs[1], &le)
	assert.Equal(t, engine.LostError{Key: "r", Op: "transition"}, *le)
	assert.NoError(t, errs[2])
	noSecret(t, errs[1], j.tok)
}

// TestSQLMockJointMySQLNotAllChanged: a joint UPDATE that changed fewer
// rows than it has writes changed none (the join is empty): each write is
// sent again alone, so the ones that hold are made and the lost one is
// named. With MultiPrimary each miss alone is first sent again causally.
func TestSQLMockJointMySQLNotAllChanged(t *testing.T) {
	for _, multi := range []bool{false, true} {
		t.Run(map[bool]string{false: "single", true: "multi-primary"}[multi], func(t *testing.T) {
			db, mock := newMock(t)
			j := newJointMock(t, engine.MySQL, engine.Options{MultiPrimary: multi})
			j.expectJoint(mock, 0, nil, nil)
			j.expectAlone(mock, multi, true, false, true)
			errs := engine.Joint(context.Background(), db, j.ops()...)
			assert.NoError(t, errs[0])
			var le *engine.LostError
			require.ErrorAs(t, errs[1], &le)
			assert.Equal(t, engine.LostError{Key: "r", Op: "transition"}, *le)
			assert.NoError(t, errs[2])
		})
	}
}

// TestSQLMockJointCoarseAlone: on MySQL a Lease with a declared coarse
// expiry column can renew without changing its row, so the rows changed
// would prove nothing: its writes are sent alone.
func TestSQLMockJointCoarseAlone(t *testing.T) {
	db, mock := newMock(t)
	j := newJointMock(t, engine.MySQL, engine.Options{ExpiryResolution: time.Second, SafetyMargin: time.Second})
	j.expectAlone(mock, false, true, true, true)
	assert.Equal(t, []error{nil, nil, nil}, engine.Joint(context.Background(), db, j.ops()...))
}

// TestSQLMockJointVictim: on a pool a victim of the joint statement took
// no effect and is sent again; inside a transaction it is returned at
// once, for every write; any other driver error is every write's error.
func TestSQLMockJointVictim(t *testing.T) {
	for _, d := range []engine.Dialect{engine.MySQL, engine.Postgres} {
		t.Run(d.String(), func(t *testing.T) {
			ctx := context.Background()
			db, mock := newMock(t)
			j := newJointMock(t, d, engine.Options{})
			j.expectJoint(mock, 0, nil, victim(d))
			j.expectJoint(mock, 3, []driver.Value{int64(2), int64(7), int64(4)}, nil)
			assert.Equal(t, []error{nil, nil, nil}, engine.Joint(ctx, db, j.ops()...))

			mock.ExpectBegin()
			j.expectJoint(mock, 0, nil, victim(d))
			mock.ExpectRollback()
			tx, err := db.Begin()
			require.NoError(t, err)
			for _, err := range engine.Joint(ctx, tx, j.ops()...) {
				assert.True(t, engine.IsRetryable(err), "%v", err)
			}
			require.NoError(t, tx.Rollback())

			boom := errors.New("connection reset")
			j.expectJoint(mock, 0, nil, boom)
			for _, err := range engine.Joint(ctx, db, j.ops()...) {
				assert.ErrorIs(t, err, boom)
			}
		})
	}
}

// TestSQLMockRunFencedJointEnd pins the end of a fenced transaction with
// two fences and a mark: BEGIN, fn's statement, one joint statement,
// COMMIT. On MySQL, when the joint UPDATE changed fewer rows than it has
// writes, the fences are sent one by one and the first that is lost is
// named; the mark is not sent.
func TestSQLMockRunFencedJointEnd(t *testing.T) {
	for _, d := range []engine.Dialect{engine.MySQL, engine.Postgres} {
		t.Run(d.String(), func(t *testing.T) {
			ctx := context.Background()
			db, mock := newMock(t)
			j := newJointMock(t, d, engine.Options{})
			tok := j.tok
			q := `WITH j0 AS (UPDATE "app"."lease_item" SET "expires_at" = CASE WHEN "token" = $1 AND "expires_at" IS NOT NULL AND "expires_at" >= (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') ` +
				`THEN ("expires_at" + CAST(1 AS bigint) * INTERVAL '1 microsecond') ELSE (` + pgNow + ` + CAST($2 AS bigint) * INTERVAL '1 microsecond') END, "updated_at" = ` + pgNow + ` ` +
				`WHERE "item_key" = $3 AND "token" = $1 AND "generation" = $4 AND "expires_at" > ` + pgNow + ` RETURNING "generation"), ` +
				`j1 AS (UPDATE "app"."lease_other" SET "expires_at" = CASE WHEN "token" = $5 AND "expires_at" IS NOT NULL AND "expires_at" >= (` + pgNow + ` + CAST($6 AS bigint) * INTERVAL '1 microsecond') ` +
				`THEN ("expires_at" + CAST(1 AS bigint) * INTERVAL '1 microsecond') ELSE (` + pgNow + ` + CAST($6 AS bigint) * INTERVAL '1 microsecond') END ` +
				`WHERE "id" = $7 AND "token" = $5 AND "gen" = $8 AND "expires_at" > ` + pgNow + ` RETURNING "gen"), ` +
				`j2 AS (UPDATE "app"."third" SET "expires_at" = NULL, "token" = NULL, "holder" = NULL, "state" = $9, "note" = $10, "updated_at" = ` + pgNow + ` ` +
				`WHERE "item_key" = $11 AND "token" = $12 AND "generation" = $13 AND "state" IN ($14) RETURNING "generation") ` +
				`SELECT (SELECT "generation" FROM j0), (SELECT "gen" FROM j1), (SELECT "generation" FROM j2)`
			args := []driver.Value{tok, int64(5000000), "k", int64(2), tok, int64(5000000), "r", int64(7), "done", "n", "c", tok, int64(4), "processing"}
			const effect = "INSERT INTO ledger VALUES (1)"
			run := func() error {
				return engine.RunFenced(ctx, db, engine.FencedTx{
					Fences: []engine.Fence{j.l.Fence("session", j.a), j.o.Fence("request", j.b)},
					Mark:   func() []engine.JointOp { return []engine.JointOp{engine.TransitionOp(j.t, j.c, mockDone)} },
				}, func(tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, effect)
					return err
				})
			}

			mock.ExpectBegin()
			mock.ExpectExec(effect).WillReturnResult(sqlmock.NewResult(0, 1))
			if d == engine.MySQL {
				mock.ExpectExec(myConfirmA).WithArgs(tok, int64(5000000), int64(5000000), "k", tok, int64(2)).WillReturnResult(sqlmock.NewResult(2, 1))
				mock.ExpectExec(myConfirmB).WithArgs(tok, int64(5000000), int64(5000000), "r", tok, int64(7)).WillReturnResult(sqlmock.NewResult(7, 1))
				mock.ExpectExec(myTransitionC).WithArgs("done", "n", "c", tok, int64(4), "processing").WillReturnResult(sqlmock.NewResult(4, 1))
			} else {
				mock.ExpectQuery(q).WithArgs(args...).WillReturnRows(sqlmock.NewRows([]string{"g0", "g1", "g2"}).AddRow(int64(2), int64(7), int64(4)))
			}
			mock.ExpectCommit()
			require.NoError(t, run())

			// The request fence is gone.
			mock.ExpectBegin()
			mock.ExpectExec(effect).WillReturnResult(sqlmock.NewResult(0, 1))
			if d == engine.MySQL {
				mock.ExpectExec(myConfirmA).WithArgs(tok, int64(5000000), int64(5000000), "k", tok, int64(2)).WillReturnResult(sqlmock.NewResult(2, 1))
				mock.ExpectExec(myConfirmB).WithArgs(tok, int64(5000000), int64(5000000), "r", tok, int64(7)).WillReturnResult(sqlmock.NewResult(0, 0))
			} else {
				mock.ExpectQuery(q).WithArgs(args...).WillReturnRows(sqlmock.NewRows([]string{"g0", "g1", "g2"}).AddRow(int64(2), nil, int64(4)))
			}
			mock.ExpectRollback()
			err := run()
			assert.ErrorIs(t, err, engine.ErrLost)
			assert.EqualError(t, err, `lease: request fence: lease: lost (key "r", confirm: token no longer matches: taken over, released or in another state)`)
			noSecret(t, err, tok)
		})
	}
}
