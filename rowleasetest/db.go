package rowleasetest

import (
	"context"
	"database/sql"
	"path/filepath"

	_ "modernc.org/sqlite" // registers the "sqlite" driver (pure Go)

	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// TB is the part of testing.TB the helpers use. *testing.T, *testing.B
// and *testing.F satisfy it. Fatalf must stop the caller, as testing's
// does (runtime.Goexit); the helpers call it only from the goroutine that
// called them.
type TB interface {
	Helper()
	Cleanup(func())
	TempDir() string
	Context() context.Context
	Logf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// NewDB opens a new SQLite database file in t.TempDir() (driver
// modernc.org/sqlite, DSN schema.SQLiteDSN: open a second pool on the
// same file with it to play another process), applies the lock tables with
// schema.Apply, and closes it at the test's cleanup (before the directory
// is removed). Any failure is t.Fatalf with the driver's error. Each call
// gives a database of its own, so parallel tests share nothing.
func NewDB(t TB) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rowlease.db")
	db, err := sql.Open("sqlite", schema.SQLiteDSN(path))
	if err != nil {
		t.Fatalf("rowleasetest: open %s: %v", path, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := schema.Apply(t.Context(), db, lease.SQLite); err != nil {
		t.Fatalf("rowleasetest: %v", err)
	}
	return db
}
