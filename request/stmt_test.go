package request

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// TestKeptStmtPreparesOncePerPool: the Runner's read of a message's
// request is prepared as lease.Options.Prepare prepares the leases'
// statements (on SQLite by default), once per connection of the pool, and
// sent as text inside a transaction and after close; a row read just
// before close is still scanned.
func TestKeptStmtPreparesOncePerPool(t *testing.T) {
	for _, c := range []struct {
		d    lease.Dialect
		mode lease.PrepareMode
		on   bool
	}{
		{lease.SQLite, lease.PrepareAuto, true}, {lease.MySQL, lease.PrepareAuto, false}, {lease.Postgres, lease.PrepareAuto, false},
		{lease.MySQL, lease.PrepareAlways, true}, {lease.Postgres, lease.PrepareAlways, true}, {lease.SQLite, lease.PrepareNever, false},
	} {
		assert.Equal(t, c.on, newKeptStmt("SELECT 1", c.d, c.mode).on, "%v %v", c.d, c.mode)
	}

	cnt := &countdb.Counter{}
	db := testdb.OpenWith(t, lease.SQLite, func(driver, dsn string) (*sql.DB, error) { return countdb.OpenDB(driver, dsn, cnt) })
	db.SetMaxOpenConns(1)
	ctx := bg(t)
	k := newKeptStmt("SELECT ? + 1", lease.SQLite, lease.PrepareAuto)
	read := func(db lease.DB, v int) int {
		t.Helper()
		var n int
		require.NoError(t, k.queryRow(ctx, db, v).Scan(&n))
		return n
	}
	cnt.Reset()
	assert.Equal(t, 2, read(db, 1))
	assert.Equal(t, 3, read(db, 2))
	assert.Equal(t, int64(1), cnt.Stats().Prepares, "prepared once, run twice")
	assert.Equal(t, int64(2), cnt.Stats().Statements)

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	cnt.Reset()
	assert.Equal(t, 4, read(tx, 3), "a transaction is not a pool: text")
	assert.Zero(t, cnt.Stats().Prepares)
	require.NoError(t, tx.Rollback())

	row := k.queryRow(ctx, db, 9)
	require.NoError(t, k.close())
	var n int
	require.NoError(t, row.Scan(&n), "a row read before close is scanned after it")
	assert.Equal(t, 10, n)
	cnt.Reset()
	assert.Equal(t, 5, read(db, 4), "closed: text")
	assert.Zero(t, cnt.Stats().Prepares)
	require.NoError(t, k.close(), "close twice")
}
