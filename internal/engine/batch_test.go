package engine_test

import (
	"context"
	"regexp"
	"strconv"
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

// countedEach runs fn per dialect on a fresh database counted at the
// driver, with the item table.
func countedEach(t *testing.T, fn func(t *testing.T, e conformance.Env, c *countdb.Counter)) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			c := &countdb.Counter{}
			db := openCounted(t, d, c)
			fn(t, conformance.Setup(t, db, engine.Options{}), c)
		})
	}
}

// acquireMany inserts and acquires n rows k0…k(n-1), in a transaction.
func acquireMany(t *testing.T, e conformance.Env, n int, ttl time.Duration) []engine.Grant[string] {
	t.Helper()
	ctx := context.Background()
	tx, err := e.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	gs := make([]engine.Grant[string], n)
	for i := range gs {
		k := "k" + strconv.Itoa(i)
		require.NoError(t, e.Lease.Ensure(ctx, tx, k, engine.CreateOptions{}))
		gs[i], err = e.Lease.Acquire(ctx, tx, k, "h"+strconv.Itoa(i), ttl)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit())
	return gs
}

// TestRenewManyOneStatement: a batch of grants is renewed by one
// statement per engine.MaxBatch (no follow-up read when every grant still
// holds, on MySQL either), each renewed grant's deadline comes from the
// send time, and the rows' expiry moves forward while the generation
// stays.
func TestRenewManyOneStatement(t *testing.T) {
	countedEach(t, func(t *testing.T, e conformance.Env, c *countdb.Counter) {
		ctx := ctxT(t)
		const ttl = 2 * time.Second
		gs := acquireMany(t, e, 30, ttl)
		before, err := e.Lease.Inspect(ctx, e.DB, "k7")
		require.NoError(t, err)
		c.Reset()
		c.Record(true)
		sent := time.Now()
		out, errs := engine.RenewMany(ctx, e.Lease, e.DB, gs, 3*ttl)
		got := time.Now()
		assert.Equal(t, int64(1), c.Count(), "one statement: %q", c.Log())
		for i := range gs {
			require.NoError(t, errs[i], "grant %d", i)
			assert.Equal(t, gs[i].Generation, out[i].Generation)
			assert.Equal(t, 3*ttl, out[i].TTL)
			assert.True(t, engine.SameToken(out[i].Token, gs[i].Token))
			margin := 3 * ttl / 10
			assert.False(t, out[i].Deadline.Before(sent.Add(3*ttl-margin-engine.Resolution(e.Lease))))
			assert.False(t, out[i].Deadline.After(got.Add(3*ttl-margin-engine.Resolution(e.Lease))))
		}
		after, err := e.Lease.Inspect(ctx, e.DB, "k7")
		require.NoError(t, err)
		assert.Greater(t, after.Remaining, before.Remaining+ttl, "expiry moved forward")
		assert.Equal(t, before.Generation, after.Generation)
		for _, q := range c.Log() {
			for _, g := range gs {
				assert.NotContains(t, q, engine.Secret(g.Token), "tokens go as arguments, not in the text")
			}
		}
	})
}

// TestRenewManyLossesOnTheirOwn: a grant whose token is gone is a
// *LostError on its own — the others of the same statement are renewed —
// and the same key may come twice, with an old and a current token. A bad
// grant is a *ValidationError and sends nothing for it.
func TestRenewManyLossesOnTheirOwn(t *testing.T) {
	countedEach(t, func(t *testing.T, e conformance.Env, c *countdb.Counter) {
		ctx := ctxT(t)
		const ttl = time.Second
		gs := acquireMany(t, e, 5, ttl)
		// k1 is released and taken by another holder; k3 is released.
		require.NoError(t, e.Lease.Release(ctx, e.DB, gs[1]))
		newer, err := e.Lease.Acquire(ctx, e.DB, "k1", "other", ttl)
		require.NoError(t, err)
		require.NoError(t, e.Lease.Release(ctx, e.DB, gs[3]))
		bad := gs[4]
		bad.Token = engine.Token{}
		batch := append(append([]engine.Grant[string](nil), gs[:4]...), newer, bad)
		c.Reset()
		out, errs := engine.RenewMany(ctx, e.Lease, e.DB, batch, ttl)
		want := int64(1)
		if e.Dialect == engine.MySQL {
			// Fewer rows changed than were sent: one read says which
			// grants still hold, and one statement renews them again, its
			// count the proof.
			want = 3
		}
		assert.Equal(t, want, c.Count())
		assert.NoError(t, errs[0])
		assert.ErrorIs(t, errs[1], engine.ErrLost)
		assert.NoError(t, errs[2])
		assert.ErrorIs(t, errs[3], engine.ErrLost)
		assert.NoError(t, errs[4], "the current holder of k1")
		assert.ErrorIs(t, errs[5], engine.ErrInvalid)
		var lost *engine.LostError
		require.ErrorAs(t, errs[1], &lost)
		assert.Equal(t, "k1", lost.Key)
		assert.NotContains(t, errs[1].Error(), engine.Secret(gs[1].Token))
		assert.Equal(t, gs[1].Deadline, out[1].Deadline, "a lost grant comes back as given")
		st, err := e.Lease.Inspect(ctx, e.DB, "k3")
		require.NoError(t, err)
		assert.False(t, st.Held, "a lost grant's row is not written")
		_, err = engine.Verify(ctx, e.Lease, e.DB, newer, false)
		assert.NoError(t, err)

		// A bad TTL rejects the whole batch before any SQL.
		c.Reset()
		_, errs = engine.RenewMany(ctx, e.Lease, e.DB, gs[:1], 0)
		assert.ErrorIs(t, errs[0], engine.ErrInvalid)
		assert.Zero(t, c.Count())
	})
}

// TestRenewManyChunks: more than engine.MaxBatch grants go in one statement
// per MaxBatch; 10,000 grants in a few seconds at most even under -race on
// a busy machine (the speed itself is measured by BenchmarkRenewMany).
func TestRenewManyChunks(t *testing.T) {
	countedEach(t, func(t *testing.T, e conformance.Env, c *countdb.Counter) {
		ctx := ctxT(t)
		const n = 2*engine.MaxBatch + 17
		gs := grantsFor(t, e, n, 30*time.Second)
		require.NoError(t, engine.Check(ctx, e.Lease, e.DB)) // the first-use check is not what is counted
		c.Reset()
		_, errs := engine.RenewMany(ctx, e.Lease, e.DB, gs, 30*time.Second)
		for i, err := range errs {
			require.NoError(t, err, "grant %d", i)
		}
		assert.Equal(t, int64(3), c.Count())
	})
}

// grantsFor inserts n rows already held (one multi-row INSERT per 500)
// and returns their grants, read back with Acquire's reentry.
func grantsFor(t testing.TB, e conformance.Env, n int, ttl time.Duration) []engine.Grant[string] {
	t.Helper()
	ctx := context.Background()
	gs := make([]engine.Grant[string], n)
	toks := make([]engine.Token, n)
	for i := range gs {
		tok, err := engine.NewToken()
		require.NoError(t, err)
		toks[i] = tok
	}
	exp := map[engine.Dialect]string{
		engine.MySQL:    "UTC_TIMESTAMP(6) + INTERVAL 1 HOUR",
		engine.Postgres: "statement_timestamp() + INTERVAL '1 hour'",
		engine.SQLite:   "(CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000 + 3600000000)",
	}[e.Dialect]
	for lo := 0; lo < n; lo += 500 {
		hi := min(lo+500, n)
		var vals []string
		var args []any
		for i := lo; i < hi; i++ {
			vals = append(vals, "(?, 'h', ?, "+exp+", 1)")
			args = append(args, "k"+strconv.Itoa(i), engine.Secret(toks[i]))
		}
		_, err := e.DB.ExecContext(ctx, e.DB.Rebind("INSERT INTO lease_item (item_key, holder, token, expires_at, generation) VALUES "+strings.Join(vals, ", ")), args...)
		require.NoError(t, err)
	}
	for i := range gs {
		gs[i] = engine.Grant[string]{Key: "k" + strconv.Itoa(i), Holder: "h", Token: toks[i], Generation: 1, TTL: ttl, Deadline: time.Now().Add(ttl / 2)}
	}
	return gs
}

// BenchmarkRenewMany renews 10,000 held leases per iteration with
// RenewMany: the target is under a second per round on the test machine.
func BenchmarkRenewMany(b *testing.B) {
	benchEach(b, func(b *testing.B, e conformance.Env, c *countdb.Counter) {
		ctx := context.Background()
		gs := grantsFor(b, e, 10000, time.Minute)
		c.Reset()
		b.ResetTimer()
		for range b.N {
			_, errs := engine.RenewMany(ctx, e.Lease, e.DB, gs, time.Minute)
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(c.Count())/float64(b.N), "stmts/op")
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/10k-leases")
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// keyList finds the key list of a batch renewal.
var keyList = regexp.MustCompile(`item_key.? IN \(([^)]*)\)`)

// TestRenewManyDuplicates: a grant given more than once gets, at every
// position, the answer of its first copy — renewed when it holds, lost
// when it does not — and its key is sent once.
func TestRenewManyDuplicates(t *testing.T) {
	countedEach(t, func(t *testing.T, e conformance.Env, c *countdb.Counter) {
		ctx := ctxT(t)
		const ttl = 5 * time.Second
		gs := acquireMany(t, e, 3, ttl)
		require.NoError(t, e.Lease.Release(ctx, e.DB, gs[2]))
		batch := []engine.Grant[string]{gs[0], gs[1], gs[0], gs[2], gs[0], gs[1], gs[2]}
		c.Reset()
		c.Record(true)
		out, errs := engine.RenewMany(ctx, e.Lease, e.DB, batch, 2*ttl)
		for _, i := range []int{0, 1, 2, 4, 5} {
			require.NoError(t, errs[i], "copy %d of a held grant", i)
			assert.Equal(t, 2*ttl, out[i].TTL)
		}
		assert.Equal(t, out[0], out[2], "a copy gets its first copy's answer")
		assert.Equal(t, out[0], out[4])
		assert.Equal(t, out[1], out[5])
		assert.ErrorIs(t, errs[3], engine.ErrLost)
		assert.ErrorIs(t, errs[6], engine.ErrLost)
		assert.Equal(t, batch[6], out[6], "a lost copy comes back as given")
		want := int64(1)
		if e.Dialect == engine.MySQL {
			want = 3 // one grant lost: a read says which, the rest are sent again
		}
		assert.Equal(t, want, c.Count(), "%q", c.Log())
		m := keyList.FindStringSubmatch(c.Log()[0])
		require.NotNil(t, m, c.Log()[0])
		assert.Len(t, strings.Split(m[1], ","), 3, "each grant once: %s", c.Log()[0])

		// All held, on MySQL too: one statement, no read.
		c.Reset()
		_, errs = engine.RenewMany(ctx, e.Lease, e.DB, []engine.Grant[string]{gs[1], gs[1], gs[0], gs[1]}, ttl)
		for i, err := range errs {
			require.NoError(t, err, "grant %d", i)
		}
		assert.Equal(t, int64(1), c.Count(), "%q", c.Log())
	})
}

// TestRenewManyChecksGeneration: a token granted again (a reentry that
// found the row free: generation+1 under the same token) does not make a
// stale copy of the earlier grant hold. RenewMany checks the generation as
// Confirm does: the stale copy is lost, alone or beside the new grant,
// and does not move the row's expiry.
func TestRenewManyChecksGeneration(t *testing.T) {
	countedEach(t, func(t *testing.T, e conformance.Env, c *countdb.Counter) {
		ctx := ctxT(t)
		const ttl = 5 * time.Second
		gs := acquireMany(t, e, 2, ttl)
		g1 := gs[0]
		require.NoError(t, e.Lease.Release(ctx, e.DB, g1))
		g2, err := e.Lease.AcquireWith(ctx, e.DB, "k0", "h0", ttl, engine.AcquireOptions{Token: g1.Token})
		require.NoError(t, err)
		require.True(t, engine.SameToken(g2.Token, g1.Token))
		require.Equal(t, g1.Generation+1, g2.Generation)

		before, err := e.Lease.Inspect(ctx, e.DB, "k0")
		require.NoError(t, err)
		out, errs := engine.RenewMany(ctx, e.Lease, e.DB, []engine.Grant[string]{g1, gs[1]}, 10*ttl)
		assert.ErrorIs(t, errs[0], engine.ErrLost, "the stale copy alone")
		assert.NoError(t, errs[1])
		assert.Equal(t, g1, out[0])
		after, err := e.Lease.Inspect(ctx, e.DB, "k0")
		require.NoError(t, err)
		assert.Less(t, after.Remaining, before.Remaining+ttl, "the stale copy renewed nothing")

		out, errs = engine.RenewMany(ctx, e.Lease, e.DB, []engine.Grant[string]{g1, g2, gs[1]}, 2*ttl)
		assert.ErrorIs(t, errs[0], engine.ErrLost, "the stale copy beside the new grant")
		assert.NoError(t, errs[1], "the new grant")
		assert.NoError(t, errs[2])
		assert.Equal(t, g2.Generation, out[1].Generation)
		assert.Equal(t, 2*ttl, out[1].TTL)
		_, err = e.Lease.Confirm(ctx, e.DB, out[1])
		assert.NoError(t, err)
	})
}

// TestMySQLRenewManyMultiPrimary runs the causal path of
// Options.MultiPrimary on a real server (MariaDB has wsrep_sync_wait
// without Galera; a single server has nothing to wait for): when fewer
// rows changed than were sent, the read of the grants that still hold is
// sent under wsrep_sync_wait, and those are renewed again on the same
// connection, in READ COMMITTED, their count the proof.
func TestMySQLRenewManyMultiPrimary(t *testing.T) {
	c := &countdb.Counter{}
	db := openCounted(t, engine.MySQL, c)
	e := conformance.Setup(t, db, engine.Options{MultiPrimary: true})
	ctx := ctxT(t)
	const ttl = 5 * time.Second
	gs := acquireMany(t, e, 3, ttl)
	require.NoError(t, e.Lease.Release(ctx, e.DB, gs[1]))
	before, err := e.Lease.Inspect(ctx, e.DB, "k2")
	require.NoError(t, err)
	c.Reset()
	c.Record(true)
	_, errs := engine.RenewMany(ctx, e.Lease, e.DB, gs, 4*ttl)
	assert.NoError(t, errs[0])
	assert.ErrorIs(t, errs[1], engine.ErrLost)
	assert.NoError(t, errs[2])
	log := c.Log()
	require.Len(t, log, 3, "%q", log)
	assert.True(t, strings.HasPrefix(log[1], "SET STATEMENT wsrep_sync_wait=15 FOR SELECT "), log[1])
	m := keyList.FindStringSubmatch(log[2])
	require.NotNil(t, m, log[2])
	assert.Len(t, strings.Split(m[1], ","), 2, "the two that still hold, again: %s", log[2])
	after, err := e.Lease.Inspect(ctx, e.DB, "k2")
	require.NoError(t, err)
	assert.Greater(t, after.Remaining, before.Remaining+ttl, "expiry moved forward")
	st, err := e.Lease.Inspect(ctx, e.DB, "k1")
	require.NoError(t, err)
	assert.False(t, st.Held)
}
