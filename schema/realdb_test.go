package schema

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/lease"
	_ "modernc.org/sqlite"
)

// Environment variables that enable the server tests.
const (
	mysqlDSNEnv    = "ROWLEASE_MYSQL_DSN"    // e.g. rowlease:rowlease@tcp(127.0.0.1:33306)/
	postgresDSNEnv = "ROWLEASE_POSTGRES_DSN" // e.g. postgres://rowlease:rowlease@127.0.0.1:5432/rowlease?sslmode=disable
)

// harness is one freshly created, empty database of one dialect.
type harness struct {
	dialect lease.Dialect
	db      *sql.DB
	// execScript sends a whole migration file in one call, as golang-migrate
	// does.
	execScript func(ctx context.Context, script string) error
}

func randomName(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return "rowlease_schema_" + hex.EncodeToString(b)
}

func TestRealSQLite(t *testing.T) {
	t.Parallel()
	// Several connections, so that the concurrent Apply really is concurrent;
	// the busy timeout makes a connection wait for another one's write lock.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "schema.db")+"?_pragma=busy_timeout(20000)")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	runRealSuite(t, &harness{
		dialect: lease.SQLite,
		db:      db,
		execScript: func(ctx context.Context, script string) error {
			_, err := db.ExecContext(ctx, script)
			return err
		},
	})
}

func TestRealMySQL(t *testing.T) {
	t.Parallel()
	dsn := os.Getenv(mysqlDSNEnv)
	if dsn == "" {
		t.Skip(mysqlDSNEnv + " is not set; skipping the MySQL/MariaDB test")
	}
	ctx := context.Background()
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err, mysqlDSNEnv)

	admin, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	name := randomName(t)
	_, err = admin.ExecContext(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})

	cfg = cfg.Clone()
	cfg.DBName = name
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	// A session time zone other than UTC proves the defaults store UTC.
	cfg.Params["time_zone"] = "'+05:00'"
	db, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })

	multi := cfg.Clone()
	multi.MultiStatements = true
	mdb, err := sql.Open("mysql", multi.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = mdb.Close() })

	var version string
	require.NoError(t, db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version))
	t.Logf("MySQL server %s, database %s", version, name)

	runRealSuite(t, &harness{
		dialect: lease.MySQL,
		db:      db,
		execScript: func(ctx context.Context, script string) error {
			_, err := mdb.ExecContext(ctx, script)
			return err
		},
	})
}

func TestRealPostgres(t *testing.T) {
	t.Parallel()
	dsn := os.Getenv(postgresDSNEnv)
	if dsn == "" {
		t.Skip(postgresDSNEnv + " is not set; skipping the PostgreSQL test")
	}
	ctx := context.Background()
	u, err := url.Parse(dsn)
	require.NoError(t, err, postgresDSNEnv)
	require.True(t, u.Scheme == "postgres" || u.Scheme == "postgresql", "%s must be a postgres:// URL", postgresDSNEnv)

	admin, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	name := randomName(t)
	_, err = admin.ExecContext(ctx, "CREATE SCHEMA "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), "DROP SCHEMA IF EXISTS "+name+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})

	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	db, err := sql.Open("pgx", u.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })

	var version, schemaName string
	require.NoError(t, db.QueryRowContext(ctx, "SELECT version(), current_schema()").Scan(&version, &schemaName))
	require.Equal(t, name, schemaName, "search_path did not take effect")
	t.Logf("%s, schema %s", version, name)

	runRealSuite(t, &harness{
		dialect: lease.Postgres,
		db:      db,
		execScript: func(ctx context.Context, script string) error {
			// Without arguments pgx uses the simple protocol, which accepts
			// several statements, as golang-migrate's postgres drivers do.
			_, err := db.ExecContext(ctx, script)
			return err
		},
	})
}

func TestApplyCanceledContext(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "canceled.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = Apply(ctx, db, lease.SQLite)
	assert.ErrorIs(t, err, context.Canceled)
	// The upgrade's catalog read comes first.
	assert.Contains(t, err.Error(), "schema: upgrade sqlite: read the CHECK")
}
