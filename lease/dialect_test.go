package lease_test

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

	"github.com/rowlease/rowlease/lease"
)

func TestParseDialect(t *testing.T) {
	cases := map[string]lease.Dialect{
		"mysql": lease.MySQL, "MySQL": lease.MySQL, "mariadb": lease.MySQL,
		"postgres": lease.Postgres, "postgresql": lease.Postgres, "pgx": lease.Postgres, "pgx/v5": lease.Postgres, " PGX ": lease.Postgres,
		"sqlite": lease.SQLite, "sqlite3": lease.SQLite, "SQLite": lease.SQLite,
	}
	for name, want := range cases {
		got, err := lease.ParseDialect(name)
		require.NoError(t, err, name)
		assert.Equal(t, want, got, name)
	}
	for _, name := range []string{"", "oracle", "pq", "mysql8", "sqlite4"} {
		_, err := lease.ParseDialect(name)
		var ve *lease.ValidationError
		assert.ErrorAs(t, err, &ve, name)
		assert.ErrorIs(t, err, lease.ErrInvalid, name)
	}
	assert.Equal(t, "mysql", lease.MySQL.String())
	assert.Equal(t, "postgres", lease.Postgres.String())
	assert.Equal(t, "sqlite", lease.SQLite.String())
	assert.Equal(t, "Dialect(0)", lease.Dialect(0).String())
	assert.Equal(t, "Dialect(7)", lease.Dialect(7).String())
	for _, d := range mockDialects {
		back, err := lease.ParseDialect(d.String())
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
		want lease.Dialect
	}{
		"sqlite *sql.DB":  {lite, lease.SQLite},
		"sqlite *sqlx.DB": {litex, lease.SQLite},
		"mysql *sql.DB":   {my, lease.MySQL},
		"mysql *sqlx.DB":  {myx, lease.MySQL},
		"pgx *sql.DB":     {pg, lease.Postgres},
		"pgx *sqlx.DB":    {pgxx, lease.Postgres},
	} {
		got, err := lease.DetectDialect(c.db)
		require.NoError(t, err, name)
		assert.Equal(t, c.want, got, name)
	}

	// *sqlx.Tx knows its driver name too.
	tx, err := litex.Beginx()
	require.NoError(t, err)
	got, err := lease.DetectDialect(tx)
	require.NoError(t, err)
	assert.Equal(t, lease.SQLite, got)
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
		_, err := lease.DetectDialect(db)
		var ve *lease.ValidationError
		assert.ErrorAs(t, err, &ve, name)
		assert.ErrorIs(t, err, lease.ErrInvalid, name)
	}
}
