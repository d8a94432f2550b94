package lease_test

import (
	"testing"

	"github.com/rowlease/rowlease/internal/conformance"
	"github.com/rowlease/rowlease/internal/testdb"
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
	// SQLite through mattn/go-sqlite3 (cgo): internal/mattn, a module of
	// its own so that the cgo driver stays out of this module's requirements.
}
