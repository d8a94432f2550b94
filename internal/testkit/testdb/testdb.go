// Package testdb opens isolated test databases for each dialect: a fresh
// SQLite file, a fresh MySQL/MariaDB database, or a fresh PostgreSQL schema
// per test, so tests can run with t.Parallel(). MySQL runs when
// ROWLEASE_MYSQL_DSN is set (go-sql-driver format, a user allowed to create
// and drop databases); PostgreSQL when ROWLEASE_POSTGRES_DSN is set (URL
// form, a user allowed to create schemas). Unset, those tests skip with a
// one-line reason. SQLite always runs.
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/jmoiron/sqlx"
	_ "github.com/mattn/go-sqlite3" // registers "sqlite3" (cgo)
	"go.uber.org/goleak"
	_ "modernc.org/sqlite" // registers "sqlite"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/sqlitedsn"
)

// Environment variables naming the servers.
const (
	MySQLEnv    = "ROWLEASE_MYSQL_DSN"
	PostgresEnv = "ROWLEASE_POSTGRES_DSN"
	// RequireAllEnv, when set (make test sets it), turns a missing DSN into
	// a test failure instead of a skip.
	RequireAllEnv = "ROWLEASE_REQUIRE_ALL"
)

func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv(RequireAllEnv) != "" {
		t.Fatalf(format+" (and %s is set: every dialect must run)", append(args, RequireAllEnv)...)
	}
	t.Skipf(format, args...)
}

// Dialects lists every dialect, in a fixed order.
func Dialects() []engine.Dialect {
	return []engine.Dialect{engine.SQLite, engine.MySQL, engine.Postgres}
}

// Each runs fn as a parallel subtest named after each dialect, on a fresh
// isolated database.
func Each(t *testing.T, fn func(t *testing.T, db *sqlx.DB)) {
	t.Helper()
	for _, d := range Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			fn(t, Open(t, d))
		})
	}
}

// sqliteSettings are what the tests' SQLite DSNs set beyond rowlease's
// own (WAL, _txlock=immediate): a busy timeout twice schema.SQLiteDSN's,
// for a loaded machine, and synchronous=NORMAL, which spares the fsync of
// every commit.
var sqliteSettings = sqlitedsn.Settings{BusyTimeout: 20 * time.Second, SynchronousNormal: true}

// SQLiteDSN is the DSN used for a SQLite file: WAL, a busy timeout so
// concurrent writers wait instead of failing, and BEGIN IMMEDIATE for
// transactions so a transaction that will write takes the write lock first.
func SQLiteDSN(path string) string { return sqlitedsn.Modernc(path, sqliteSettings) }

// Mattn3DSN is the DSN of a SQLite file for mattn/go-sqlite3, with the
// same settings as SQLiteDSN in that driver's spelling.
func Mattn3DSN(path string) string { return sqlitedsn.Mattn(path, sqliteSettings) }

// OpenMattn returns a fresh SQLite database opened through
// mattn/go-sqlite3 (driver name "sqlite3", which needs cgo), closed at
// cleanup: the second SQLite driver the library supports.
func OpenMattn(t testing.TB) *sqlx.DB {
	t.Helper()
	db, err := sqlx.Open("sqlite3", Mattn3DSN(filepath.Join(t.TempDir(), "test.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Ping(); err != nil {
		t.Fatalf("sqlite3 (mattn/go-sqlite3, needs cgo): %v", err)
	}
	return db
}

// Open returns a fresh database of dialect d for this test, closed and
// dropped at cleanup. It skips the test when the dialect's server is not
// configured.
func Open(t testing.TB, d engine.Dialect) *sqlx.DB { return OpenWith(t, d, sql.Open) }

// OpenWith is Open with the *sql.DB opened by open (for example
// countdb.OpenDB with a counter), given the driver name and the test
// database's DSN.
func OpenWith(t testing.TB, d engine.Dialect, open func(driver, dsn string) (*sql.DB, error)) *sqlx.DB {
	t.Helper()
	connect := func(driver, dsn string) (*sqlx.DB, error) {
		db, err := open(driver, dsn)
		if err != nil {
			return nil, err
		}
		return sqlx.NewDb(db, driver), nil
	}
	name := "rl_" + randHex(6)
	switch d {
	case engine.SQLite:
		db, err := connect("sqlite", SQLiteDSN(filepath.Join(t.TempDir(), "test.db")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	case engine.MySQL:
		dsn := os.Getenv(MySQLEnv)
		if dsn == "" {
			skipOrFail(t, "mysql: %s not set", MySQLEnv)
		}
		admin := adminDB(t, "mysql", dsn)
		if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
			t.Fatalf("mysql: create database: %v", err)
		}
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatalf("mysql: %s: %v", MySQLEnv, err)
		}
		cfg.DBName = name
		cfg.ParseTime = true
		// One round trip per statement: without it go-sql-driver prepares,
		// executes and closes a statement for every query with arguments.
		cfg.InterpolateParams = true
		return isolated(t, admin, "mysql", "DROP DATABASE IF EXISTS "+name)(connect("mysql", cfg.FormatDSN()))
	case engine.Postgres:
		dsn := os.Getenv(PostgresEnv)
		if dsn == "" {
			skipOrFail(t, "postgres: %s not set", PostgresEnv)
		}
		admin := adminDB(t, "pgx", dsn)
		if _, err := admin.Exec("CREATE SCHEMA " + name); err != nil {
			t.Fatalf("postgres: create schema: %v", err)
		}
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatalf("postgres: %s: %v", PostgresEnv, err)
		}
		q := u.Query()
		q.Set("search_path", name)
		u.RawQuery = q.Encode()
		return isolated(t, admin, "postgres", "DROP SCHEMA IF EXISTS "+name+" CASCADE")(connect("pgx", u.String()))
	}
	t.Fatalf("unknown dialect %v", d)
	return nil
}

// isolated finishes opening a per-test database: it fails the test on an
// open error, and at cleanup closes the pool and runs drop on the admin
// connection.
func isolated(t testing.TB, admin *sql.DB, label, drop string) func(*sqlx.DB, error) *sqlx.DB {
	return func(db *sqlx.DB, err error) *sqlx.DB {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: open: %v", label, err)
		}
		db.SetMaxOpenConns(40)
		t.Cleanup(func() {
			db.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := admin.ExecContext(ctx, drop); err != nil {
				t.Logf("%s: %s: %v", label, drop, err)
			}
		})
		return db
	}
}

var (
	adminMu  sync.Mutex
	adminDBs = map[string]*sql.DB{}
)

// adminDB is one shared connection pool per server, used to create and
// drop the per-test databases and schemas. It lives for the test binary.
func adminDB(t testing.TB, driver, dsn string) *sql.DB {
	adminMu.Lock()
	defer adminMu.Unlock()
	if db, ok := adminDBs[dsn]; ok {
		return db
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("%s: open: %v", driver, err)
	}
	db.SetMaxOpenConns(4)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		t.Fatalf("%s: cannot reach the server in the DSN: %v", driver, err)
	}
	adminDBs[dsn] = db
	return db
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("testdb: %v", err))
	}
	return hex.EncodeToString(b)
}

// Main runs a package's tests, then closes the shared admin pools and
// fails the run if any goroutine is left behind (goleak). Use it as
//
//	func TestMain(m *testing.M) { testdb.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	adminMu.Lock()
	for dsn, db := range adminDBs {
		db.Close()
		delete(adminDBs, dsn)
	}
	adminMu.Unlock()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines left behind after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
