package engine_test

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// TestMySQLJointSameMicrosecond: a joint UPDATE of three confirmations in
// the same microsecond as the acquires (the session clock pinned) is one
// statement that changes every row — each expiry moves on by a
// microsecond — in every affected-rows mode, so its count proves that every
// grant held. Twice, to renew what was just renewed.
func TestMySQLJointSameMicrosecond(t *testing.T) {
	e := conformance.Setup(t, testdb.Open(t, engine.MySQL), engine.Options{})
	other, third := e.ItemLike(t, "lease_other"), e.ItemLike(t, "lease_third")
	ctx := ctxT(t)
	for mode, pool := range mysqlPools(t, e.DB) {
		t.Run(mode, func(t *testing.T) {
			conn := pinnedConn(t, ctx, pool)
			var gs []engine.Grant[string]
			leases := []*engine.Lease[string]{e.Lease, other, third}
			for _, l := range leases {
				require.NoError(t, l.Ensure(ctx, conn, mode, engine.CreateOptions{}))
				g, err := l.Acquire(ctx, conn, mode, "h", 10*time.Second)
				require.NoError(t, err)
				gs = append(gs, g)
			}
			c := &countdb.Counter{}
			db := c.Wrap(conn)
			for round := 1; round <= 2; round++ {
				c.Reset()
				errs := engine.Joint(ctx, db, engine.ConfirmOp(e.Lease, gs[0]), engine.ConfirmOp(other, gs[1]), engine.ConfirmOp(third, gs[2]))
				require.Equal(t, []error{nil, nil, nil}, errs, "round %d", round)
				assert.Equal(t, int64(1), c.Count(), "round %d: one statement, every row changed", round)
				for _, table := range []string{conformance.ItemTable, "lease_other", "lease_third"} {
					exp := myQueryString(t, ctx, conn, "SELECT CAST(expires_at AS CHAR) FROM "+table+" WHERE item_key = ?", mode)
					assert.Equal(t, "2026-01-01 00:00:10.12345"+string(rune('6'+round)), exp, "%s, round %d: a microsecond on", table, round)
				}
			}
		})
	}
}

// TestMySQLJointMultiPrimary runs Joint and the end of RunFenced with
// Options.MultiPrimary on a real server (MariaDB has wsrep_sync_wait
// without Galera): the joint statement is sent as it is; when a grant is
// gone, each write is sent alone, and the miss is sent once more
// causally before it is a loss. RunFenced sends its fences one by one on
// MySQL (see RunFenced), the lost one causally too; the lost fence is then
// checked by a causal read outside the transaction, which agrees: ErrLost,
// not ErrNodeBehind.
func TestMySQLJointMultiPrimary(t *testing.T) {
	c := &countdb.Counter{}
	e := conformance.Setup(t, openCounted(t, engine.MySQL, c), engine.Options{MultiPrimary: true})
	other2, err := engine.New[string](engine.MySQL, engine.TableOf(e.ItemLike(t, "lease_other")), engine.Options{MultiPrimary: true})
	require.NoError(t, err)
	ctx := ctxT(t)
	hold := func(l *engine.Lease[string], key string) engine.Grant[string] {
		require.NoError(t, l.Ensure(ctx, e.DB, key, engine.CreateOptions{}))
		g, err := l.Acquire(ctx, e.DB, key, "h", 30*time.Second)
		require.NoError(t, err)
		return g
	}
	a, b := hold(e.Lease, "a"), hold(other2, "b")
	c.Reset()
	c.Record(true)
	require.Equal(t, []error{nil, nil}, engine.Joint(ctx, e.DB, engine.ConfirmOp(e.Lease, a), engine.ConfirmOp(other2, b)))
	assert.Len(t, c.Log(), 1, "all held: one statement")

	require.NoError(t, other2.Release(ctx, e.DB, b))
	c.Reset()
	errs := engine.Joint(ctx, e.DB, engine.ConfirmOp(e.Lease, a), engine.ConfirmOp(other2, b))
	assert.NoError(t, errs[0])
	assert.ErrorIs(t, errs[1], engine.ErrLost)
	log := c.Log()
	require.Len(t, log, 4, "%q", log)
	assert.True(t, strings.HasPrefix(log[0], "UPDATE `lease_item` AS j0, `lease_other` AS j1 "), log[0])
	assert.True(t, strings.HasPrefix(log[3], "SET STATEMENT wsrep_sync_wait=15 FOR UPDATE `lease_other` "), log[3])

	c.Reset()
	err = engine.RunFenced(ctx, e.DB, engine.FencedTx{
		Fences: []engine.Fence{e.Lease.Fence("session", a), other2.Fence("request", b)},
	}, func(tx *sql.Tx) error { return nil })
	assert.ErrorIs(t, err, engine.ErrLost)
	assert.NotErrorIs(t, err, engine.ErrNodeBehind)
	assert.ErrorContains(t, err, "lease: request fence")
	log = c.Log()
	// The fences one by one, the lost one causally too; then, outside the
	// rolled-back transaction, Verify of each fence, whose miss is
	// confirmed causally.
	require.Len(t, log, 6, "%q", log)
	assert.True(t, strings.HasPrefix(log[0], "UPDATE `lease_item` SET "), log[0])
	assert.True(t, strings.HasPrefix(log[1], "UPDATE `lease_other` SET "), log[1])
	assert.True(t, strings.HasPrefix(log[2], "SET STATEMENT wsrep_sync_wait=15 FOR UPDATE `lease_other` "), log[2])
	assert.True(t, strings.HasPrefix(log[3], "SELECT `generation` FROM `lease_item` "), log[3])
	assert.True(t, strings.HasPrefix(log[4], "SELECT `generation` FROM `lease_other` "), log[4])
	assert.True(t, strings.HasPrefix(log[5], "SET STATEMENT wsrep_sync_wait=15 FOR SELECT `generation` FROM `lease_other` "), log[5])
}
