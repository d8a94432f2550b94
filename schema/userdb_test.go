package schema_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
)

// TestLeaseColumnsDDLOnUserTables: the statements LeaseColumnsDDL gives
// add the lease columns to a user's own tables on each real database, and
// leases then work on them: a jobs table under lease.Lease (its existing
// rows free, at generation 0, their data untouched) and a chat_session
// table under session.Locker with the lock columns mapped (the shape the
// session package documents).
func TestLeaseColumnsDDLOnUserTables(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			leaseColumnsOnUserTables(t, d, testdb.Open(t, d))
		})
	}
}

func leaseColumnsOnUserTables(t *testing.T, d lease.Dialect, db *sqlx.DB) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	_, err := db.ExecContext(ctx, "CREATE TABLE jobs (id VARCHAR(64) NOT NULL PRIMARY KEY, name VARCHAR(100) NOT NULL)")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, d.Rebind("INSERT INTO jobs (id, name) VALUES (?, ?)"), "j1", "nightly")
	require.NoError(t, err)
	jobs, err := lease.NewTable("jobs", lease.Columns{Key: "id", Holder: "lock_holder", Token: "lock_token",
		ExpiresAt: "lock_expires_at", Generation: "lock_generation"})
	require.NoError(t, err)
	stmts, err := schema.LeaseColumnsDDL(d, jobs)
	require.NoError(t, err)
	for _, s := range stmts {
		_, err := db.ExecContext(ctx, s)
		require.NoError(t, err, s)
	}

	l, err := lease.New[string](d, jobs, lease.Options{})
	require.NoError(t, err)
	defer l.Close()
	st, err := l.Inspect(ctx, db, "j1")
	require.NoError(t, err)
	assert.False(t, st.Held, "an existing row comes out free")
	assert.Zero(t, st.Generation)
	g, err := l.Acquire(ctx, db, "j1", "worker-1", time.Minute)
	require.NoError(t, err)
	_, err = l.Acquire(ctx, db, "j1", "worker-2", time.Minute)
	assert.ErrorIs(t, err, lease.ErrHeld)
	g, err = l.Renew(ctx, db, g, time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx, db, g))
	g2, err := l.Acquire(ctx, db, "j1", "worker-2", time.Minute)
	require.NoError(t, err)
	assert.Greater(t, g2.Generation, g.Generation)
	var name string
	require.NoError(t, db.GetContext(ctx, &name, d.Rebind("SELECT name FROM jobs WHERE id = ?"), "j1"))
	assert.Equal(t, "nightly", name)

	// The session lock on the user's own session table.
	_, err = db.ExecContext(ctx, "CREATE TABLE chat_session (id VARCHAR(191) NOT NULL PRIMARY KEY, title VARCHAR(100) NOT NULL)")
	require.NoError(t, err)
	cols := lease.Columns{Key: "id", Holder: "current_request_id", Token: "lock_token",
		ExpiresAt: "lock_expires_at", Generation: "lock_generation"}
	chat, err := lease.NewTable("chat_session", cols)
	require.NoError(t, err)
	stmts, err = schema.LeaseColumnsDDL(d, chat)
	require.NoError(t, err)
	for _, s := range stmts {
		_, err := db.ExecContext(ctx, s)
		require.NoError(t, err, s)
	}
	_, err = db.ExecContext(ctx, d.Rebind("INSERT INTO chat_session (id, title) VALUES (?, ?)"), "s1", "lunch")
	require.NoError(t, err)
	locker, err := session.New(session.Config{Dialect: d, Table: "chat_session", Columns: cols})
	require.NoError(t, err)
	defer locker.Close()
	sg, err := locker.Acquire(ctx, db, "s1", "request-1", time.Minute)
	require.NoError(t, err)
	_, err = locker.Acquire(ctx, db, "s1", "request-2", time.Minute)
	assert.ErrorAs(t, err, new(*session.BusyError))
	require.NoError(t, locker.Release(ctx, db, sg))

	// Run twice, the database refuses: the columns exist.
	_, err = db.ExecContext(ctx, stmts[0])
	assert.Error(t, err)
}

// TestLeaseColumnsDDLStatements pins the statements' shape per dialect and
// the errors for bad input.
func TestLeaseColumnsDDLStatements(t *testing.T) {
	tbl := engine.MustTable("app.jobs", lease.Columns{Key: "id", Holder: "holder", Token: "token",
		ExpiresAt: "expires_at", Generation: "generation", UpdatedAt: "updated_at"})
	my, err := schema.LeaseColumnsDDL(lease.MySQL, tbl)
	require.NoError(t, err)
	require.Len(t, my, 1)
	assert.Equal(t, "ALTER TABLE `app`.`jobs` ADD COLUMN `holder` VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL, "+
		"ADD COLUMN `token` VARCHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL, "+
		"ADD COLUMN `expires_at` DATETIME(6) NULL, ADD COLUMN `generation` BIGINT NOT NULL DEFAULT 0", my[0])
	pg, err := schema.LeaseColumnsDDL(lease.Postgres, tbl)
	require.NoError(t, err)
	require.Len(t, pg, 1)
	assert.Contains(t, pg[0], `"expires_at" TIMESTAMPTZ NULL`)
	lite, err := schema.LeaseColumnsDDL(lease.SQLite, tbl)
	require.NoError(t, err)
	require.Len(t, lite, 4, "SQLite adds one column per statement")
	for _, s := range lite {
		assert.NotContains(t, s, "updated_at", "optional columns are the user's own")
		assert.True(t, strings.HasPrefix(s, `ALTER TABLE "app"."jobs" ADD COLUMN `), s)
	}

	_, err = schema.LeaseColumnsDDL(lease.Dialect(99), tbl)
	assert.ErrorIs(t, err, schema.ErrUnknownDialect)
	_, err = schema.LeaseColumnsDDL(lease.MySQL, lease.Table{})
	assert.ErrorIs(t, err, lease.ErrInvalid)
	var ve *engine.ValidationError
	assert.True(t, errors.As(err, &ve))
}

// TestSQLiteDSN: SQLiteDSN builds, without options and with those of the
// benchmark report and of the example bookkeeper, the exact DSNs they
// wrote out before, and modernc.org/sqlite applies every setting.
func TestSQLiteDSN(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name                 string
		opts                 []schema.SQLiteOption
		want                 string
		busy, sync, foreignK int
	}{
		{"default", nil,
			"file:%s?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate", 10000, 2, 0},
		{"benchreport", []schema.SQLiteOption{schema.SQLiteBusyTimeout(20 * time.Second), schema.SQLiteSynchronousNormal()},
			"file:%s?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate", 20000, 1, 0},
		{"bookkeeper", []schema.SQLiteOption{schema.SQLiteForeignKeys(), schema.SQLiteSynchronousNormal(), schema.SQLiteBusyTimeout(20 * time.Second)},
			"file:%s?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)&_txlock=immediate", 20000, 1, 1},
		{"no busy timeout keeps the default", []schema.SQLiteOption{schema.SQLiteBusyTimeout(0)},
			"file:%s?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate", 10000, 2, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "app.db")
			dsn := schema.SQLiteDSN(path, c.opts...)
			require.Equal(t, fmt.Sprintf(c.want, path), dsn)

			db, err := sql.Open("sqlite", dsn)
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			var mode string
			var busy, sync, fk int
			require.NoError(t, db.QueryRowContext(t.Context(), "PRAGMA journal_mode").Scan(&mode))
			require.NoError(t, db.QueryRowContext(t.Context(), "PRAGMA busy_timeout").Scan(&busy))
			require.NoError(t, db.QueryRowContext(t.Context(), "PRAGMA synchronous").Scan(&sync))
			require.NoError(t, db.QueryRowContext(t.Context(), "PRAGMA foreign_keys").Scan(&fk))
			assert.Equal(t, "wal", mode)
			assert.Equal(t, []int{c.busy, c.sync, c.foreignK}, []int{busy, sync, fk}, "busy_timeout, synchronous, foreign_keys")
		})
	}
}
