package engine_test

import (
	"database/sql"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// TestMain fails the run if any goroutine is left behind.
func TestMain(m *testing.M) { testdb.Main(m) }

// openCounted opens a fresh isolated database of dialect d whose
// statements c counts at the driver.
func openCounted(tb testing.TB, d engine.Dialect, c *countdb.Counter) *sqlx.DB {
	return testdb.OpenWith(tb, d, func(driver, dsn string) (*sql.DB, error) { return countdb.OpenDB(driver, dsn, c) })
}
