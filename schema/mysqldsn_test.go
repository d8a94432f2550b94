package schema

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMySQLDSN(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"u:p@tcp(db:3306)/app", "u:p@tcp(db:3306)/app?interpolateParams=true&parseTime=true"},
		{"u:p@tcp(db:3306)/app?parseTime=false&interpolateParams=false", "u:p@tcp(db:3306)/app?interpolateParams=true&parseTime=true"},
		{"u:p@tcp(db:3306)/app?tls=skip-verify&charset=utf8mb4&timeout=2s", "u:p@tcp(db:3306)/app?charset=utf8mb4&interpolateParams=true&parseTime=true&timeout=2s&tls=skip-verify"},
	} {
		got, err := MySQLDSN(c.in)
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, got, c.in)
		cfg, err := mysql.ParseDSN(got)
		require.NoError(t, err)
		assert.True(t, cfg.InterpolateParams && cfg.ParseTime, got)
	}
}

func TestMySQLDSNRefuses(t *testing.T) {
	for _, in := range []string{
		"not a dsn",
		"u:secret-pw@tcp(db:3306)/app?charset=sjis", // the driver will not interpolate into it
		"u:secret-pw@tcp(db:3306)/app?parseTime=maybe",
		"u:secret-pw@tcp(db:3306)/app?collation=gbk_chinese_ci",
	} {
		_, err := MySQLDSN(in)
		require.Error(t, err, in)
		assert.True(t, errors.Is(err, ErrDSN), "%v", err)
		assert.NotContains(t, err.Error(), "secret-pw")
	}
}

// TestMySQLDSNOnTheServer opens a pool with the DSN MySQLDSN returns and
// checks that a statement with an argument is sent as text (interpolated):
// the server's count of prepared statements does not move.
func TestMySQLDSNOnTheServer(t *testing.T) {
	base := os.Getenv("ROWLEASE_MYSQL_DSN")
	if base == "" {
		if os.Getenv("ROWLEASE_REQUIRE_ALL") != "" {
			t.Fatal("ROWLEASE_MYSQL_DSN is not set")
		}
		t.Skip("ROWLEASE_MYSQL_DSN is not set")
	}
	cfg, err := mysql.ParseDSN(base)
	require.NoError(t, err)
	cfg.InterpolateParams = false
	dsn, err := MySQLDSN(cfg.FormatDSN())
	require.NoError(t, err)
	db, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	prepared := func() int64 {
		var name string
		var n int64
		require.NoError(t, db.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Com_stmt_prepare'").Scan(&name, &n))
		return n
	}
	before := prepared()
	var got string
	require.NoError(t, db.QueryRowContext(ctx, "SELECT CONCAT(?, 'x')", "a").Scan(&got))
	assert.Equal(t, "ax", got)
	assert.Equal(t, before, prepared(), "a statement with an argument was prepared: interpolateParams is off")
	var now sql.NullTime
	require.NoError(t, db.QueryRowContext(ctx, "SELECT NOW(6)").Scan(&now), "parseTime is off")
	assert.True(t, now.Valid)
	assert.False(t, strings.Contains(dsn, "interpolateParams=false"))
}
