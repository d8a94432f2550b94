package engine_test

import (
	"testing"

	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// TestConformance runs the lease conformance suite, unchanged, on every
// dialect: SQLite always, MySQL/MariaDB and PostgreSQL when their DSNs are set.
func TestConformance(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			conformance.RunLease(t, d)
		})
	}
	// SQLite through its other common driver, mattn/go-sqlite3 (cgo).
	t.Run("sqlite3-mattn", func(t *testing.T) {
		t.Parallel()
		conformance.RunLeaseOn(t, testdb.OpenMattn)
	})
}
