package testdb

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"

	"github.com/rowlease/rowlease/internal/engine"
)

// PoolMaxConns is the MaxConns of the pools OpenPgxPool opens: the same
// bound as the database/sql pools of Open (SetMaxOpenConns(40)), so that a
// case or a benchmark gets as many connections through either handle.
const PoolMaxConns = 40

// OpenPgxPool returns a fresh PostgreSQL schema, like Open(t,
// engine.Postgres), reached the way a service that already has a
// *pgxpool.Pool reaches it: through pgx's database/sql adapter,
// stdlib.OpenDBFromPool. The pool is returned too, for a test that checks
// it served the statements or sends its own through it. Both are closed,
// and the schema dropped, at cleanup. It skips (or fails, under
// ROWLEASE_REQUIRE_ALL) when ROWLEASE_POSTGRES_DSN is not set.
func OpenPgxPool(t testing.TB) (*sqlx.DB, *pgxpool.Pool) {
	t.Helper()
	var pool *pgxpool.Pool
	db := OpenWith(t, engine.Postgres, func(_, dsn string) (*sql.DB, error) {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return nil, err
		}
		cfg.MaxConns = PoolMaxConns
		if pool, err = pgxpool.NewWithConfig(context.Background(), cfg); err != nil {
			return nil, err
		}
		t.Cleanup(pool.Close) // after the *sql.DB's cleanup, which does not close the pool
		return stdlib.OpenDBFromPool(pool), nil
	})
	return db, pool
}
