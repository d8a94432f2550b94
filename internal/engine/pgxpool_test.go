package engine_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// TestDetectDialectPgxPool: the *sql.DB that stdlib.OpenDBFromPool makes
// of a *pgxpool.Pool, what a service that already has a pool hands to
// rowlease, is told to be PostgreSQL by its driver's type, as the one of
// sql.Open("pgx", dsn) is. No server is needed: the pool connects on
// first use.
func TestDetectDialectPgxPool(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://u:p@127.0.0.1:1/db")
	require.NoError(t, err)
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	got, err := engine.DetectDialect(db)
	require.NoError(t, err)
	assert.Equal(t, engine.Postgres, got)
}

// TestConformancePgxPool runs the lease conformance suite, unchanged, on
// PostgreSQL a second time: through a *pgxpool.Pool behind pgx's
// database/sql adapter (stdlib.OpenDBFromPool), which hands every
// statement a connection acquired from the pool and gives it back after.
// Each case checks at its end that the pool served its statements.
func TestConformancePgxPool(t *testing.T) {
	t.Run(engine.Postgres.String(), func(t *testing.T) {
		t.Parallel()
		conformance.RunLeaseOn(t, func(t testing.TB) *sqlx.DB {
			db, pool := testdb.OpenPgxPool(t)
			t.Cleanup(func() { // before the pool and the *sql.DB are closed
				if pool.Stat().AcquireCount() == 0 {
					t.Errorf("the pgxpool served no statement")
				}
			})
			return db
		})
	})
}
