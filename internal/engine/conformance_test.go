package engine_test

import (
	"testing"

	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// TestConformance is the driver suite: it runs the lease conformance
// suite (internal/testkit/conformance), unchanged, through a Lease of each
// dialect, and so on each driver of internal/driver — mysql, postgres and
// sqlite, each subtest named after its driver: SQLite always,
// MySQL/MariaDB and PostgreSQL when their DSNs are set (all three with
// ROWLEASE_REQUIRE_ALL). A new driver passes when its subtest does.
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
