package engine_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/DATA-DOG/go-sqlmock"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // registers "sqlite"

	"github.com/rowlease/rowlease/internal/engine"
)

func TestParseDialect(t *testing.T) {
	cases := map[string]engine.Dialect{
		"mysql": engine.MySQL, "MySQL": engine.MySQL, "mariadb": engine.MySQL,
		"postgres": engine.Postgres, "postgresql": engine.Postgres, "pgx": engine.Postgres, "pgx/v5": engine.Postgres, " PGX ": engine.Postgres,
		"sqlite": engine.SQLite, "sqlite3": engine.SQLite, "SQLite": engine.SQLite,
	}
	for name, want := range cases {
		got, err := engine.ParseDialect(name)
		require.NoError(t, err, name)
		assert.Equal(t, want, got, name)
	}
	for _, name := range []string{"", "oracle", "pq", "mysql8", "sqlite4"} {
		_, err := engine.ParseDialect(name)
		var ve *engine.ValidationError
		assert.ErrorAs(t, err, &ve, name)
		assert.ErrorIs(t, err, engine.ErrInvalid, name)
	}
	assert.Equal(t, "mysql", engine.MySQL.String())
	assert.Equal(t, "postgres", engine.Postgres.String())
	assert.Equal(t, "sqlite", engine.SQLite.String())
	assert.Equal(t, "Dialect(0)", engine.Dialect(0).String())
	assert.Equal(t, "Dialect(7)", engine.Dialect(7).String())
	for _, d := range mockDialects {
		back, err := engine.ParseDialect(d.String())
		require.NoError(t, err)
		assert.Equal(t, d, back)
	}
}

func TestDetectDialect(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.db")
	lite, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer lite.Close()
	litex, err := sqlx.Open("sqlite", path)
	require.NoError(t, err)
	defer litex.Close()
	// Neither of these connects: sql.Open only records the DSN.
	my, err := sql.Open("mysql", "u:p@tcp(127.0.0.1:1)/db")
	require.NoError(t, err)
	defer my.Close()
	pg, err := sql.Open("pgx", "postgres://u:p@127.0.0.1:1/db")
	require.NoError(t, err)
	defer pg.Close()
	myx := sqlx.NewDb(my, "mysql")
	pgxx := sqlx.NewDb(pg, "pgx")

	for name, c := range map[string]struct {
		db   any
		want engine.Dialect
	}{
		"sqlite *sql.DB":  {lite, engine.SQLite},
		"sqlite *sqlx.DB": {litex, engine.SQLite},
		"mysql *sql.DB":   {my, engine.MySQL},
		"mysql *sqlx.DB":  {myx, engine.MySQL},
		"pgx *sql.DB":     {pg, engine.Postgres},
		"pgx *sqlx.DB":    {pgxx, engine.Postgres},
	} {
		got, err := engine.DetectDialect(c.db)
		require.NoError(t, err, name)
		assert.Equal(t, c.want, got, name)
	}

	// *sqlx.Tx knows its driver name too.
	tx, err := litex.Beginx()
	require.NoError(t, err)
	got, err := engine.DetectDialect(tx)
	require.NoError(t, err)
	assert.Equal(t, engine.SQLite, got)
	require.NoError(t, tx.Rollback())

	mockDB, _, err := sqlmock.New()
	require.NoError(t, err)
	defer mockDB.Close()
	var nilDB *sql.DB
	for name, db := range map[string]any{
		"unknown driver": mockDB,
		"nil":            nil,
		"typed nil":      nilDB,
		"not a db":       "mysql",
		"unknown sqlx":   sqlx.NewDb(mockDB, "oracle"),
		"*sql.Tx has no driver name": func() any {
			tx, err := lite.Begin()
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback() })
			return tx
		}(),
	} {
		_, err := engine.DetectDialect(db)
		var ve *engine.ValidationError
		assert.ErrorAs(t, err, &ve, name)
		assert.ErrorIs(t, err, engine.ErrInvalid, name)
	}
}
