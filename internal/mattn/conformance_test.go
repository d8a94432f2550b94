package mattn_test

import (
	"path/filepath"
	"testing"

	"github.com/jmoiron/sqlx"
	_ "github.com/mattn/go-sqlite3" // registers "sqlite3" (cgo)

	"github.com/rowlease/rowlease/internal/conformance"
)

// DSN is the DSN of a SQLite file for mattn/go-sqlite3, with the settings
// of schema.SQLiteDSN (modernc.org/sqlite) in that driver's spelling.
func DSN(path string) string {
	return "file:" + path + "?_busy_timeout=20000&_journal_mode=WAL&_synchronous=NORMAL&_txlock=immediate"
}

// open returns a fresh SQLite database opened through mattn/go-sqlite3,
// closed at cleanup.
func open(t testing.TB) *sqlx.DB {
	t.Helper()
	db, err := sqlx.Open("sqlite3", DSN(filepath.Join(t.TempDir(), "test.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Ping(); err != nil {
		t.Fatalf("sqlite3 (mattn/go-sqlite3, needs cgo): %v", err)
	}
	return db
}

// TestConformance runs the lease conformance suite, unchanged, on SQLite
// through its other common driver, mattn/go-sqlite3 (cgo).
func TestConformance(t *testing.T) {
	t.Run("sqlite3-mattn", func(t *testing.T) {
		t.Parallel()
		conformance.RunLeaseOn(t, open)
	})
}
