package engine_test

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// TestCheckRefusesWrongDialect: a Lease made for one dialect and used on
// another database is refused at first use with ErrInvalid naming both
// dialects, whatever the handle: a *sqlx.DB (its driver name tells), a
// *sql.DB whose driver the package does not know (a wrapper: the check's
// statement fails, and the driver error's type tells), a transaction.
func TestCheckRefusesWrongDialect(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var c countdb.Counter
			db := openCounted(t, d, &c)
			e := conformance.Setup(t, db, engine.Options{})
			e.Insert(t, "k")
			before := e.ReadRow(t, "k")
			handles := map[string]func(t *testing.T) (engine.DB, func()){
				"*sqlx.DB":             func(*testing.T) (engine.DB, func()) { return db, func() {} },
				"*sql.DB of a wrapper": func(*testing.T) (engine.DB, func()) { return db.DB, func() {} },
				"*sql.Tx": func(t *testing.T) (engine.DB, func()) {
					tx, err := db.DB.BeginTx(ctx, nil)
					require.NoError(t, err)
					return tx, func() { _ = tx.Rollback() }
				},
			}
			for _, other := range testdb.Dialects() {
				if other == d {
					continue
				}
				for name, open := range handles {
					l, err := engine.New[string](other, engine.MustTable(conformance.ItemTable, conformance.ItemColumns), engine.Options{})
					require.NoError(t, err)
					h, done := open(t)
					_, err = l.Acquire(ctx, h, "k", "a", time.Minute)
					done()
					var ve *engine.ValidationError
					require.ErrorAs(t, err, &ve, "%s lease on %s through %s", other, d, name)
					assert.ErrorIs(t, err, engine.ErrInvalid)
					assert.Equal(t, "dialect", ve.Field)
					assert.Contains(t, err.Error(), other.String(), name)
					assert.Contains(t, err.Error(), "the database is "+d.String(), name)
					// Refused again, at once, without a statement.
					h, done = open(t)
					n := c.Count()
					_, err = l.Renew(ctx, h, engine.Grant[string]{Key: "k", Token: mustToken(t), Generation: 1}, time.Minute)
					done()
					assert.ErrorIs(t, err, engine.ErrInvalid, name)
					assert.Equal(t, n, c.Count(), "%s: a refusal is remembered", name)
				}
			}
			assert.Equal(t, before, e.ReadRow(t, "k"), "nothing was written")
		})
	}
}

func mustToken(t *testing.T) engine.Token {
	t.Helper()
	tok, err := engine.NewToken()
	require.NoError(t, err)
	return tok
}

// TestCheckOncePerHandle: the first-use check costs one statement once per
// pool, and once for all the transactions (and other handles whose pool
// cannot be seen) of a Lease; never per operation.
func TestCheckOncePerHandle(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var c countdb.Counter
			db := openCounted(t, d, &c)
			e := conformance.Setup(t, db, engine.Options{SkipCheck: true})
			l, err := engine.New[string](d, engine.MustTable(conformance.ItemTable, conformance.ItemColumns), engine.Options{})
			require.NoError(t, err)
			for i := range 20 {
				e.Insert(t, fmt.Sprint("k", i))
			}
			pool := db.DB
			count := func(fn func()) int64 {
				n := c.Count()
				fn()
				return c.Count() - n
			}
			var g engine.Grant[string]
			assert.Equal(t, int64(2), count(func() { g, err = l.Acquire(ctx, pool, "k0", "a", time.Minute); require.NoError(t, err) }),
				"the first operation on a pool: the check and the statement")
			assert.Equal(t, int64(1), count(func() { g, err = l.Renew(ctx, pool, g, time.Minute); require.NoError(t, err) }))
			flow := engine.NewFlowDB(pool, d)
			assert.Equal(t, int64(1), count(func() { g, err = l.Renew(ctx, flow, g, time.Minute); require.NoError(t, err) }),
				"a FlowDB is checked as its pool")
			for i := 1; i < 20; i++ {
				tx, err := pool.BeginTx(ctx, nil)
				require.NoError(t, err)
				want := int64(1)
				if i == 1 {
					want = 2 // the one check of every transaction of the Lease
				}
				assert.Equal(t, want, count(func() {
					_, err := l.Acquire(ctx, tx, fmt.Sprint("k", i), "a", time.Minute)
					require.NoError(t, err)
				}), "transaction %d", i)
				require.NoError(t, tx.Commit())
			}
			require.NoError(t, engine.Check(ctx, l, pool))
			require.NoError(t, engine.Check(ctx, l, db), "a *sqlx.DB is a handle of its own")
			assert.Zero(t, count(func() { require.NoError(t, engine.Check(ctx, l, db)) }), "checked once")
		})
	}
}

// coarseCase is a user's table whose expiry column keeps whole seconds.
type coarseCase struct {
	d       engine.Dialect
	expType string
	typ     string // as the error names it
}

// TestCheckCoarseExpiryColumn: an expiry column coarser than a
// microsecond that Options.ExpiryResolution does not declare (a MySQL
// DATETIME without a fraction, a PostgreSQL timestamptz(0)) is refused at
// first use, naming the column, and nothing is written. Undeclared, such a
// column made renewals in the same second come back lost (MySQL) and let
// the stored expiry fall before the holder's trust deadline. Declared, the
// same table works: renewals succeed and the stored expiry stays a whole
// safety margin after every trust deadline.
func TestCheckCoarseExpiryColumn(t *testing.T) {
	for _, c := range []coarseCase{
		{engine.MySQL, "DATETIME", "datetime(0)"},
		{engine.MySQL, "DATETIME(3)", "datetime(3)"},
		{engine.Postgres, "TIMESTAMPTZ(0)", "timestamptz(0)"},
		{engine.Postgres, "TIMESTAMP(2)", "timestamp(2)"},
	} {
		t.Run(c.d.String()+"/"+c.expType, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testdb.Open(t, c.d)
			_, err := db.ExecContext(ctx, "CREATE TABLE jobs (id VARCHAR(64) NOT NULL PRIMARY KEY, owner VARCHAR(191) NULL, "+
				"lease_token CHAR(36) NULL, lease_expires_at "+c.expType+" NULL, lease_gen BIGINT NOT NULL DEFAULT 0)")
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, "INSERT INTO jobs (id) VALUES ('j')")
			require.NoError(t, err)
			tbl := engine.MustTable("jobs", engine.Columns{Key: "id", Holder: "owner", Token: "lease_token", ExpiresAt: "lease_expires_at", Generation: "lease_gen"})
			step := time.Second
			if c.expType == "DATETIME(3)" {
				step = time.Millisecond
			} else if c.expType == "TIMESTAMP(2)" {
				step = 10 * time.Millisecond
			}
			const ttl = 3 * time.Second

			for _, declared := range []time.Duration{0, step / 10} {
				l, err := engine.New[string](c.d, tbl, engine.Options{ExpiryResolution: declared})
				require.NoError(t, err)
				g, err := l.Acquire(ctx, db, "j", "a", ttl)
				if err == nil {
					lost := 0
					for range 200 {
						if g2, err := l.Renew(ctx, db, g, ttl); errors.Is(err, engine.ErrLost) {
							lost++
						} else if err == nil {
							g = g2
						}
					}
					t.Fatalf("declared %s: the coarse column was used (of 200 renewals, %d came back lost)", declared, lost)
				}
				var ve *engine.ValidationError
				require.ErrorAs(t, err, &ve, "declared %s", declared)
				assert.Equal(t, "expiry column", ve.Field)
				assert.Contains(t, err.Error(), "jobs.lease_expires_at is "+c.typ)
				assert.Contains(t, err.Error(), "ExpiryResolution = "+step.String())
				var gen int64
				require.NoError(t, db.GetContext(ctx, &gen, "SELECT lease_gen FROM jobs WHERE id = 'j'"))
				assert.Zero(t, gen, "nothing was written")
			}

			// Declared: it works, with no false loss and no overlap.
			const margin = 300 * time.Millisecond
			l, err := engine.New[string](c.d, tbl, engine.Options{ExpiryResolution: step, SafetyMargin: margin})
			require.NoError(t, err)
			g, err := l.Acquire(ctx, db, "j", "a", ttl)
			require.NoError(t, err)
			for i := range 100 {
				g, err = l.Renew(ctx, db, g, ttl)
				require.NoError(t, err, "renewal %d", i)
				st, err := l.Inspect(ctx, db, "j")
				require.NoError(t, err)
				local := time.Until(g.Deadline)
				assert.GreaterOrEqual(t, st.Remaining, local+margin, "renewal %d: the stored expiry falls within the margin of the trust deadline", i)
			}
			_, err = l.Acquire(ctx, db, "j", "b", ttl)
			assert.ErrorIs(t, err, engine.ErrHeld)
		})
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCheckSQLiteSettings: on SQLite the first use logs a warning, once
// per handle, for a busy timeout of 0 and for a journal mode other than
// WAL; the DSN the package doc gives (and schema.SQLiteDSN) logs
// nothing. Neither setting is refused: leases stay correct without them.
func TestCheckSQLiteSettings(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		driver, dsn string
		want        []string
	}{
		{"sqlite", "", []string{"busy_timeout is 0", "journal_mode is not WAL"}},
		{"sqlite", "?_pragma=busy_timeout(5000)", []string{"journal_mode is not WAL"}},
		{"sqlite", "?_pragma=journal_mode(WAL)", []string{"busy_timeout is 0"}},
		{"sqlite", "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate", nil},
		{"sqlite3", "?_busy_timeout=10000&_journal_mode=WAL&_txlock=immediate", nil},
	} {
		t.Run(c.driver+c.dsn, func(t *testing.T) {
			raw, err := sql.Open(c.driver, "file:"+filepath.Join(t.TempDir(), "s.db")+c.dsn)
			require.NoError(t, err)
			t.Cleanup(func() { raw.Close() })
			db := sqlx.NewDb(raw, c.driver)
			e := conformance.Setup(t, db, engine.Options{SkipCheck: true})
			e.Insert(t, "k")
			var log syncBuffer
			l, err := engine.New[string](engine.SQLite, engine.MustTable(conformance.ItemTable, conformance.ItemColumns),
				engine.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
			require.NoError(t, err)
			g, err := l.Acquire(ctx, db, "k", "a", time.Minute)
			require.NoError(t, err, "a warning, not a refusal")
			_, err = l.Renew(ctx, db, g, time.Minute)
			require.NoError(t, err)
			out := log.String()
			for _, w := range c.want {
				assert.Equal(t, 1, strings.Count(out, w), "%q logged once in:\n%s", w, out)
			}
			if c.want == nil {
				assert.Empty(t, out)
			}
			assert.NotContains(t, out, engine.Secret(g.Token))
		})
	}
}

// TestSQLMockCheckStatement pins the check's statement in each dialect:
// sent once, before the first operation on a pool, and not again.
func TestSQLMockCheckStatement(t *testing.T) {
	for _, d := range mockDialects {
		t.Run(d.String(), func(t *testing.T) {
			db, mock := newMock(t)
			l, err := engine.New[string](d, mockTable, engine.Options{Prepare: engine.PrepareNever})
			require.NoError(t, err)
			q := map[engine.Dialect]string{
				engine.MySQL: "SELECT DATABASE(), DATA_TYPE, DATETIME_PRECISION FROM information_schema.COLUMNS " +
					"WHERE TABLE_SCHEMA = 'app' AND TABLE_NAME = 'lease_item' AND COLUMN_NAME = 'expires_at'",
				engine.Postgres: `SELECT t.typname, a.atttypmod FROM (SELECT to_regclass('"app"."lease_item"') AS r) x ` +
					`LEFT JOIN pg_attribute a ON a.attrelid = x.r AND a.attname = 'expires_at' AND NOT a.attisdropped ` +
					`LEFT JOIN pg_type t ON t.oid = a.atttypid`,
				engine.SQLite: "SELECT (SELECT * FROM pragma_busy_timeout), (SELECT * FROM pragma_journal_mode)",
			}[d]
			row := map[engine.Dialect][]driver.Value{
				engine.MySQL:    {"app", "datetime", int64(6)},
				engine.Postgres: {"timestamptz", int64(-1)},
				engine.SQLite:   {int64(10000), "wal"},
			}[d]
			mock.ExpectQuery(q).WithoutArgs().WillReturnRows(sqlmock.NewRows([]string{"a", "b", "c"}[:len(row)]).AddRow(row...))
			op := mockOp1(t, "Inspect")
			for range 2 {
				mock.ExpectQuery(op.sql[d].(string)).WithArgs("k").WillReturnRows(
					sqlmock.NewRows([]string{"h", "g", "s", "held", "us"}).AddRow("", int64(0), "", int64(0), int64(0)))
				_, err := l.Inspect(context.Background(), db, "k")
				require.NoError(t, err)
			}
		})
	}
}

// TestCheckMySQLInterpolateParams: on MySQL, a pool whose DSN leaves
// interpolateParams off (go-sql-driver's default: every statement with
// arguments is prepared, run and closed: two round trips where one
// does) is logged as a warning at first use, once per pool however many
// Leases use it; a pool with interpolateParams=true, or a Lease that keeps
// its statements prepared (PrepareAlways), logs nothing. The check still
// sends its one statement and still judges the expiry column.
func TestCheckMySQLInterpolateParams(t *testing.T) {
	ctx := context.Background()
	db := testdb.Open(t, engine.MySQL)
	e := conformance.Setup(t, db, engine.Options{SkipCheck: true})
	e.Insert(t, "k")
	pools := mysqlPools(t, db)
	for _, c := range []struct {
		pool    string
		prepare engine.PrepareMode
		warned  bool
	}{
		{"changedRows", engine.PrepareAuto, true},
		{"clientFoundRows", engine.PrepareAuto, true},
		{"interpolateParams", engine.PrepareAuto, false},
		{"changedRows", engine.PrepareAlways, false},
	} {
		t.Run(fmt.Sprintf("%s/prepare=%d", c.pool, c.prepare), func(t *testing.T) {
			pool := pools[c.pool]
			if c.pool == "changedRows" && c.prepare == engine.PrepareAlways {
				// A pool of its own: the warning is once per pool.
				cfg, err := mysql.ParseDSN(os.Getenv(testdb.MySQLEnv))
				require.NoError(t, err)
				var name string
				require.NoError(t, db.Get(&name, "SELECT DATABASE()"))
				cfg.DBName, cfg.ParseTime = name, true
				pool, err = sql.Open("mysql", cfg.FormatDSN())
				require.NoError(t, err)
				t.Cleanup(func() { pool.Close() })
			}
			var log syncBuffer
			for range 3 { // three Leases on one pool, as the request flow has
				l, err := engine.New[string](engine.MySQL, engine.MustTable(conformance.ItemTable, conformance.ItemColumns),
					engine.Options{Logger: slog.New(slog.NewTextHandler(&log, nil)), Prepare: c.prepare})
				require.NoError(t, err)
				require.NoError(t, engine.Check(ctx, l, pool), "a warning, not a refusal")
				g, err := l.Acquire(ctx, pool, "k", "a", time.Minute)
				require.NoError(t, err)
				require.NoError(t, l.Release(ctx, pool, g))
				assert.NotContains(t, log.String(), engine.Secret(g.Token))
				if c.prepare == engine.PrepareAlways {
					require.NoError(t, l.Close())
				}
			}
			out := log.String()
			if c.warned {
				assert.Equal(t, 1, strings.Count(out, "level=WARN"), "warned once per pool:\n%s", out)
				assert.Contains(t, out, "interpolateParams=true")
				assert.Empty(t, shownDSN(out, os.Getenv(testdb.MySQLEnv)), "no DSN in the log")
			} else {
				assert.Empty(t, out)
			}
		})
	}
}

// shownDSN returns what text shows of the MySQL DSN dsn, or "": the DSN
// as given, as the driver formats it, or its credentials (user:password@,
// the part every DSN built from it shares, the test's pools included).
// It does not look for the password alone: a short one is in any text.
func shownDSN(text, dsn string) string {
	if dsn == "" {
		return ""
	}
	forms := []string{dsn}
	if cfg, err := mysql.ParseDSN(dsn); err == nil {
		forms = append(forms, cfg.FormatDSN())
		if cfg.Passwd != "" {
			forms = append(forms, cfg.User+":"+cfg.Passwd+"@")
		}
	}
	for _, f := range forms {
		if strings.Contains(text, f) {
			return f
		}
	}
	return ""
}

// TestShownDSN: the check that a log shows no DSN finds one in the log,
// and finds none in a log that does not show it, however short the
// password (a one-letter one is in any text).
func TestShownDSN(t *testing.T) {
	warning := `level=WARN msg="lease: the MySQL DSN has no interpolateParams=true: go-sql-driver prepares, runs and closes every statement with arguments; add interpolateParams=true to the DSN"`
	for _, dsn := range []string{"u:p@tcp(127.0.0.1:3306)/", "rowlease:a-longer-password@tcp(db:3306)/app?parseTime=true"} {
		assert.Empty(t, shownDSN(warning, dsn), "%s", dsn)
		assert.NotEmpty(t, shownDSN(warning+" dsn="+dsn, dsn), "%s", dsn)
		cfg, err := mysql.ParseDSN(dsn)
		require.NoError(t, err)
		cfg.DBName, cfg.InterpolateParams = "rowlease_test_1", true // a pool's DSN, built from it
		assert.NotEmpty(t, shownDSN(warning+" dsn="+cfg.FormatDSN(), dsn), "%s", dsn)
	}
}
