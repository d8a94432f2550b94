package countdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // registers "sqlite"
)

// target is one database the driver tests run against.
type target struct {
	driver, dsn string
	table       string                // qualified name of the test table
	rebind      func(q string) string // ? placeholders to the driver's
	prepArgs    int64                 // Prepares per statement with arguments
}

func identity(q string) string { return q }

// dollar rewrites ? placeholders to $1, $2, ...
func dollar(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func randName() string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return "countdb_" + hex.EncodeToString(b)
}

const createTable = "CREATE TABLE %s (k VARCHAR(64) PRIMARY KEY, v INTEGER NOT NULL)"

// sqliteTarget is a fresh SQLite file in t.TempDir().
func sqliteTarget(t *testing.T) *target {
	dsn := "file:" + filepath.Join(t.TempDir(), "count.db") +
		"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate"
	plain, err := sql.Open("sqlite", dsn)
	require.NoError(t, err)
	defer plain.Close()
	_, err = plain.Exec(fmt.Sprintf(createTable, "t"))
	require.NoError(t, err)
	return &target{driver: "sqlite", dsn: dsn, table: "t", rebind: identity}
}

// mysqlTarget is a fresh database on the ROWLEASE_MYSQL_DSN server, made
// and dropped through a plain connection. Without interpolateParams, the
// driver declines statements with arguments (driver.ErrSkip) and
// database/sql prepares them: one Prepare per such statement.
func mysqlTarget(t *testing.T, interpolate bool) *target {
	base := os.Getenv("ROWLEASE_MYSQL_DSN")
	if base == "" {
		t.Skip("ROWLEASE_MYSQL_DSN not set")
	}
	admin, err := sql.Open("mysql", base)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close() })
	name := randName()
	_, err = admin.Exec("CREATE DATABASE " + name)
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := admin.Exec("DROP DATABASE IF EXISTS " + name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	_, err = admin.Exec(fmt.Sprintf(createTable, name+".t"))
	require.NoError(t, err)
	cfg, err := mysql.ParseDSN(base)
	require.NoError(t, err)
	cfg.DBName = name
	cfg.InterpolateParams = interpolate
	tg := &target{driver: "mysql", dsn: cfg.FormatDSN(), table: "t", rebind: identity}
	if !interpolate {
		tg.prepArgs = 1
	}
	return tg
}

// postgresTarget is a table in a fresh schema on the ROWLEASE_POSTGRES_DSN
// server, dropped at cleanup.
func postgresTarget(t *testing.T) *target {
	dsn := os.Getenv("ROWLEASE_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("ROWLEASE_POSTGRES_DSN not set")
	}
	admin, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close() })
	name := randName()
	_, err = admin.Exec("CREATE SCHEMA " + name)
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := admin.Exec("DROP SCHEMA IF EXISTS " + name + " CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	_, err = admin.Exec(fmt.Sprintf(createTable, name+".t"))
	require.NoError(t, err)
	return &target{driver: "pgx", dsn: dsn, table: name + ".t", rebind: dollar}
}

// TestDriverCounts pins exact counts for each kind of round trip on every
// configured database.
func TestDriverCounts(t *testing.T) {
	targets := []struct {
		name string
		open func(t *testing.T) *target
	}{
		{"sqlite", sqliteTarget},
		{"mysql/interpolateParams", func(t *testing.T) *target { return mysqlTarget(t, true) }},
		{"mysql/prepare", func(t *testing.T) *target { return mysqlTarget(t, false) }},
		{"postgres", postgresTarget},
	}
	for _, tt := range targets {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tg := tt.open(t)
			var c Counter
			db, err := OpenDB(tg.driver, tg.dsn, &c)
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			db.SetMaxOpenConns(4)
			testCounts(t, tg, db, &c)
		})
	}
}

func testCounts(t *testing.T, tg *target, db *sql.DB, c *Counter) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := tg.prepArgs
	q := func(s string) string { return tg.rebind(strings.ReplaceAll(s, "{t}", tg.table)) }
	ins := q("INSERT INTO {t} (k, v) VALUES (?, ?)")
	sel := q("SELECT v FROM {t} WHERE k = ?")
	// value reads k's v without counting it; -1 if there is no such row.
	value := func(t *testing.T, k string) int {
		t.Helper()
		c.Pause()
		defer c.Resume()
		v := -1
		err := db.QueryRowContext(ctx, sel, k).Scan(&v)
		if err != sql.ErrNoRows {
			require.NoError(t, err)
		}
		return v
	}
	// check runs fn on a reset, recording counter and pins what it counted.
	check := func(name string, want Stats, wantLog []string, fn func(t *testing.T)) {
		t.Run(name, func(t *testing.T) {
			c.Reset()
			c.Record(true)
			defer c.Record(false)
			fn(t)
			assert.Equal(t, want, c.Stats())
			assert.Equal(t, want.Statements, c.Count())
			assert.Equal(t, wantLog, c.Log())
		})
	}

	del := q("DELETE FROM {t} WHERE k = 'none'")
	check("exec without args", Stats{Statements: 1}, []string{del}, func(t *testing.T) {
		_, err := db.ExecContext(ctx, del)
		require.NoError(t, err)
	})

	check("exec with args", Stats{Statements: 1, Prepares: p}, []string{ins}, func(t *testing.T) {
		_, err := db.ExecContext(ctx, ins, "a", 1)
		require.NoError(t, err)
	})

	check("query row with args", Stats{Statements: 1, Prepares: p}, []string{sel}, func(t *testing.T) {
		var v int
		require.NoError(t, db.QueryRowContext(ctx, sel, "a").Scan(&v))
		assert.Equal(t, 1, v)
	})

	check("tx commit", Stats{Statements: 2, Begins: 1, Commits: 1, Prepares: 2 * p}, []string{ins, ins}, func(t *testing.T) {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, ins, "b", 2)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, ins, "c", 3)
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		assert.Equal(t, 2, value(t, "b"))
		assert.Equal(t, 3, value(t, "c"))
	})

	check("tx rollback", Stats{Statements: 1, Begins: 1, Rollbacks: 1, Prepares: p}, []string{ins}, func(t *testing.T) {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, ins, "d", 4)
		require.NoError(t, err)
		require.NoError(t, tx.Rollback())
		assert.Equal(t, -1, value(t, "d"))
	})

	check("pause excludes", Stats{Statements: 2, Prepares: 2 * p}, []string{ins, ins}, func(t *testing.T) {
		_, err := db.ExecContext(ctx, ins, "e1", 5)
		require.NoError(t, err)
		c.Pause()
		_, err = db.ExecContext(ctx, ins, "e2", 5)
		require.NoError(t, err)
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, ins, "e3", 5)
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		_, err = db.ExecContext(ctx, del)
		require.NoError(t, err)
		c.Resume()
		_, err = db.ExecContext(ctx, ins, "e4", 5)
		require.NoError(t, err)
		for _, k := range []string{"e1", "e2", "e3", "e4"} {
			assert.Equal(t, 5, value(t, k), k)
		}
	})

	check("prepared stmt", Stats{Statements: 2, Prepares: 1}, []string{ins, ins}, func(t *testing.T) {
		conn, err := db.Conn(ctx) // one conn, so the stmt is prepared once
		require.NoError(t, err)
		defer conn.Close()
		st, err := conn.PrepareContext(ctx, ins)
		require.NoError(t, err)
		defer st.Close()
		_, err = st.ExecContext(ctx, "f1", 6)
		require.NoError(t, err)
		_, err = st.ExecContext(ctx, "f2", 6)
		require.NoError(t, err)
	})

	const workers, iters = 8, 10
	ops := int64(workers * iters)
	t.Run("concurrent", func(t *testing.T) {
		c.Reset()
		c.Record(true)
		defer c.Record(false)
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				errs <- concurrentWork(ctx, db, ins, sel, w, iters)
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		// Per op: an exec and a query row outside a tx, and a tx with one
		// exec and a commit.
		want := Stats{Statements: 3 * ops, Begins: ops, Commits: ops, Prepares: 3 * ops * p}
		assert.Equal(t, want, c.Stats())
		assert.Len(t, c.Log(), int(want.Statements))
	})
}

// concurrentWork runs iters rounds of an exec, a query row and a one-exec
// transaction, as worker w.
func concurrentWork(ctx context.Context, db *sql.DB, ins, sel string, w, iters int) error {
	for i := range iters {
		k := fmt.Sprintf("w%d-%d", w, i)
		if _, err := db.ExecContext(ctx, ins, k, i); err != nil {
			return err
		}
		var v int
		if err := db.QueryRowContext(ctx, sel, k).Scan(&v); err != nil {
			return err
		}
		if v != i {
			return fmt.Errorf("%s: got %d, want %d", k, v, i)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, ins, k+"-tx", i); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// TestWrapSharesCounter checks that the Wrap path and the driver path add
// to one count, and that Pause applies to both.
func TestWrapSharesCounter(t *testing.T) {
	tg := sqliteTarget(t)
	plain, err := sql.Open("sqlite", tg.dsn)
	require.NoError(t, err)
	defer plain.Close()
	var c Counter
	db, err := OpenDB("sqlite", tg.dsn, &c)
	require.NoError(t, err)
	defer db.Close()
	ctx := context.Background()

	wrapped := c.Wrap(plain)
	_, err = wrapped.ExecContext(ctx, "INSERT INTO t (k, v) VALUES (?, ?)", "a", 1)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "INSERT INTO t (k, v) VALUES (?, ?)", "b", 2)
	require.NoError(t, err)
	c.Pause()
	_, err = wrapped.ExecContext(ctx, "DELETE FROM t WHERE k = 'none'")
	require.NoError(t, err)
	c.Resume()
	assert.Equal(t, int64(2), c.Count())
	assert.Equal(t, Stats{Statements: 2}, c.Stats())
}

// TestPauseConcurrent checks that Pause/Resume nest and are race-free.
func TestPauseConcurrent(t *testing.T) {
	var c Counter
	c.Resume() // without a Pause: no effect
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 1000 {
				c.Pause()
				c.add("paused")
				c.Resume()
			}
		})
	}
	wg.Wait()
	assert.True(t, c.counting())
	assert.Equal(t, int64(0), c.Count())
	c.Pause()
	c.Pause()
	c.Resume()
	c.add("still paused")
	c.Resume()
	c.add("counted")
	assert.Equal(t, int64(1), c.Count())
}

// The fake driver below implements only the required driver interfaces,
// plus whichever optional ones a test embeds, to check what the wrapper
// claims and its fallbacks.

type fakeConn struct{ execs *[]string }

func (f fakeConn) Prepare(q string) (driver.Stmt, error) { return fakeStmt{q: q, execs: f.execs}, nil }
func (fakeConn) Close() error                            { return nil }
func (fakeConn) Begin() (driver.Tx, error)               { return fakeTx{}, nil }

type fakeResetter struct{ fakeConn }

func (fakeResetter) ResetSession(context.Context) error { return nil }

type fakeValidator struct{ fakeConn }

func (fakeValidator) IsValid() bool { return true }

type fakeBoth struct{ fakeConn }

func (fakeBoth) ResetSession(context.Context) error       { return nil }
func (fakeBoth) IsValid() bool                            { return true }
func (fakeBoth) CheckNamedValue(*driver.NamedValue) error { return nil }

type fakeTx struct{}

func (fakeTx) Commit() error   { return nil }
func (fakeTx) Rollback() error { return nil }

type fakeStmt struct {
	q     string
	execs *[]string
}

func (fakeStmt) Close() error  { return nil }
func (fakeStmt) NumInput() int { return -1 }
func (s fakeStmt) Exec([]driver.Value) (driver.Result, error) {
	*s.execs = append(*s.execs, s.q)
	return driver.RowsAffected(1), nil
}
func (fakeStmt) Query([]driver.Value) (driver.Rows, error) { return nil, driver.ErrSkip }

type fakeCCStmt struct{ fakeStmt }

func (fakeCCStmt) ColumnConverter(int) driver.ValueConverter { return driver.DefaultParameterConverter }

// TestWrapperInterfaces checks that the session interfaces and
// ColumnConverter are claimed exactly when the driver has them, and that
// the other optional interfaces fall back to database/sql's defaults.
func TestWrapperInterfaces(t *testing.T) {
	var c Counter
	var execs []string
	base := fakeConn{execs: &execs}
	for _, tt := range []struct {
		name       string
		ci         driver.Conn
		reset, val bool
	}{
		{"bare", base, false, false},
		{"resetter", fakeResetter{base}, true, false},
		{"validator", fakeValidator{base}, false, true},
		{"both", fakeBoth{base}, true, true},
	} {
		w := wrapConn(tt.ci, &c)
		_, r := w.(driver.SessionResetter)
		_, v := w.(driver.Validator)
		assert.Equal(t, tt.reset, r, tt.name)
		assert.Equal(t, tt.val, v, tt.name)
		assert.Equal(t, tt.ci, w.(interface{ Unwrap() driver.Conn }).Unwrap(), tt.name)
	}

	bare := wrapConn(base, &c)
	nv := &driver.NamedValue{Ordinal: 1, Value: 1}
	assert.ErrorIs(t, bare.(driver.NamedValueChecker).CheckNamedValue(nv), driver.ErrSkip)
	assert.NoError(t, wrapConn(fakeBoth{base}, &c).(driver.NamedValueChecker).CheckNamedValue(nv))
	_, err := bare.(driver.ExecerContext).ExecContext(context.Background(), "x", nil)
	assert.ErrorIs(t, err, driver.ErrSkip)
	_, err = bare.(driver.ConnBeginTx).BeginTx(context.Background(), driver.TxOptions{ReadOnly: true})
	assert.Error(t, err)
	assert.Equal(t, Stats{}, c.Stats(), "declined calls are not counted")

	st, err := bare.Prepare("x")
	require.NoError(t, err)
	_, cc := st.(driver.ColumnConverter)
	assert.False(t, cc)
	assert.ErrorIs(t, st.(driver.NamedValueChecker).CheckNamedValue(nv), driver.ErrSkip)
	st = &stmtCC{&stmt{si: fakeCCStmt{}, ci: base, c: &c}}
	_, cc = st.(driver.ColumnConverter)
	assert.True(t, cc)
}

var (
	registerFake sync.Once
	fakeExecs    []string // what the registered fake driver executed
)

// fakeDriver opens bare fakeConns, which have no Execer: database/sql
// prepares every statement.
type fakeDriver struct{ execs *[]string }

func (d fakeDriver) Open(string) (driver.Conn, error) { return fakeConn(d), nil }

// TestFallbackDriver runs database/sql over a driver with no optional
// interfaces and no driver.DriverContext: statements go through a prepare,
// and are counted once each.
func TestFallbackDriver(t *testing.T) {
	registerFake.Do(func() { sql.Register("countdb-fake", fakeDriver{execs: &fakeExecs}) })
	fakeExecs = nil
	var c Counter
	db, err := OpenDB("countdb-fake", "", &c)
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	_, err = db.ExecContext(ctx, "one", 1)
	require.NoError(t, err)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, "two")
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	_, err = db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
	assert.Error(t, err)
	assert.Equal(t, Stats{Statements: 2, Prepares: 2, Begins: 1, Commits: 1}, c.Stats())
	assert.Equal(t, []string{"one", "two"}, fakeExecs)
}
