package engine_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/mattn/go-sqlite3" // registers "sqlite3" (cgo)
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
)

// TestSQLiteDriverErrors: both SQLite drivers' real errors are recognised —
// modernc.org/sqlite's through its Code method, mattn/go-sqlite3's (a
// struct with Code and ExtendedCode fields, no method) by its fields. A
// unique-key violation is a duplicate key, and SQLITE_BUSY (a writer
// holding the lock, no busy timeout) is retryable, on both. Lease.Create
// translates the duplicate to ErrExists.
func TestSQLiteDriverErrors(t *testing.T) {
	for driver, dsn := range map[string]string{
		"sqlite":  "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(0)",
		"sqlite3": "?_journal_mode=WAL&_busy_timeout=0",
	} {
		t.Run(driver, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			db, err := sql.Open(driver, "file:"+filepath.Join(t.TempDir(), "e.db")+dsn)
			require.NoError(t, err)
			defer db.Close()
			_, err = db.ExecContext(ctx, "CREATE TABLE t (k TEXT PRIMARY KEY, holder TEXT, token TEXT, expires_at INTEGER, generation INTEGER NOT NULL DEFAULT 0)")
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, "INSERT INTO t (k) VALUES ('a')")
			require.NoError(t, err)

			_, err = db.ExecContext(ctx, "INSERT INTO t (k) VALUES ('a')")
			require.Error(t, err)
			assert.True(t, engine.IsDuplicateKey(err), "%T %v", err, err)
			assert.False(t, engine.IsRetryable(err))

			l, err := engine.New[string](engine.SQLite, engine.MustTable("t", engine.Columns{Key: "k", Holder: "holder",
				Token: "token", ExpiresAt: "expires_at", Generation: "generation"}), engine.Options{})
			require.NoError(t, err)
			defer l.Close()
			_, err = l.Create(ctx, db, "a", "h", time.Second, engine.CreateOptions{})
			assert.ErrorIs(t, err, engine.ErrExists)

			// Another connection holds the write lock: SQLITE_BUSY at once.
			locker, err := db.Conn(ctx)
			require.NoError(t, err)
			defer locker.Close()
			_, err = locker.ExecContext(ctx, "BEGIN IMMEDIATE")
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, "INSERT INTO t (k) VALUES ('b')")
			require.Error(t, err)
			assert.True(t, engine.IsRetryable(err), "%T %v", err, err)
			assert.True(t, engine.IsTransient(err))
			assert.False(t, engine.IsDuplicateKey(err))
			_, err = locker.ExecContext(ctx, "ROLLBACK")
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, "INSERT INTO t (k) VALUES ('b')")
			require.NoError(t, err, "retried once the lock is gone")
		})
	}
}

// TestMattnErrorsWrapped: a mattn/go-sqlite3 error is found as a value or
// a pointer, wrapped or joined, and only by its extended code.
func TestMattnErrorsWrapped(t *testing.T) {
	dup := sqlite3.Error{Code: sqlite3.ErrConstraint, ExtendedCode: sqlite3.ErrConstraintUnique}
	pk := &sqlite3.Error{Code: sqlite3.ErrConstraint, ExtendedCode: sqlite3.ErrConstraintPrimaryKey}
	check := sqlite3.Error{Code: sqlite3.ErrConstraint, ExtendedCode: sqlite3.ErrConstraintCheck}
	busy := sqlite3.Error{Code: sqlite3.ErrBusy, ExtendedCode: sqlite3.ErrBusySnapshot}
	var nilErr *sqlite3.Error
	for name, c := range map[string]struct {
		err       error
		dup, busy bool
	}{
		"unique":           {dup, true, false},
		"primary key ptr":  {pk, true, false},
		"check":            {check, false, false},
		"busy snapshot":    {busy, false, true},
		"wrapped":          {fmt.Errorf("insert: %w", dup), true, false},
		"joined":           {errors.Join(errors.New("x"), fmt.Errorf("y: %w", busy)), false, true},
		"typed nil":        {nilErr, false, false},
		"other error type": {errors.New("UNIQUE constraint failed"), false, false},
	} {
		assert.Equal(t, c.dup, engine.IsDuplicateKey(c.err), name)
		assert.Equal(t, c.busy, engine.IsRetryable(c.err), name)
		assert.Equal(t, c.busy, engine.IsTransient(c.err), name)
	}
}

// TestMattnLockedIsTransient: SQLITE_LOCKED from mattn/go-sqlite3 is
// transient (not a retryable deadlock victim), as modernc's is.
func TestMattnLockedIsTransient(t *testing.T) {
	locked := sqlite3.Error{Code: sqlite3.ErrLocked, ExtendedCode: sqlite3.ErrLockedSharedCache}
	assert.True(t, engine.IsTransient(fmt.Errorf("w: %w", locked)))
	assert.False(t, engine.IsRetryable(locked))
}
