package conformance

// The acquire-create cases: a lease taken and a new row inserted held,
// both or neither (engine.AcquireCreate: one statement on PostgreSQL, on a
// pool or in a transaction; AcquireWith then Create in a transaction on
// MySQL and SQLite, which refuse it on a pool).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/retry"
)

// acquireCreateCases are the acquire-create cases of the suite.
var acquireCreateCases = []struct {
	name string
	fn   func(t *testing.T, e Env)
}{
	{"AcquireCreateBothOrNeither", acquireCreateBothOrNeither},
	{"AcquireCreateOneWinner", acquireCreateOneWinner},
	{"AcquireCreateUnless", acquireCreateUnless},
	{"AcquireCreateUnlessOneRow", acquireCreateUnlessOneRow},
}

// onPoolOrTx runs f on the pool (inTx false) or in a transaction of its
// own, committed when f succeeds and rolled back when it fails.
func onPoolOrTx(ctx context.Context, e Env, inTx bool, f func(db engine.DB) error) error {
	if !inTx {
		return f(e.DB)
	}
	tx, err := e.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// acquireCreate runs engine.AcquireCreate on the pool or in a transaction
// of its own (onPoolOrTx).
func acquireCreate(ctx context.Context, e Env, inTx bool, a engine.AcquireOp[string], c engine.CreateOp[string]) (ga engine.Grant[string], gc engine.Grant[string], err error) {
	err = onPoolOrTx(ctx, e, inTx, func(db engine.DB) (err error) {
		ga, gc, err = engine.AcquireCreate(ctx, db, a, c)
		return err
	})
	return ga, gc, err
}

// missing asserts that key has no row in l's table.
func missing(t *testing.T, ctx context.Context, e Env, l *engine.Lease[string], key string) {
	t.Helper()
	_, err := l.Inspect(ctx, e.DB, key)
	assert.ErrorIs(t, err, engine.ErrNotFound, "no row %q was inserted", key)
}

// acquireCreateBothOrNeither: the acquire matches and the row is inserted,
// both held; an acquire that does not match (held, no row, another state)
// inserts nothing and says why as AcquireWith does; a duplicate row undoes
// the acquire. In a transaction on every dialect, and on a pool on
// PostgreSQL; on a pool MySQL and SQLite refuse it and write nothing.
func acquireCreateBothOrNeither(t *testing.T, e Env) {
	ctx := ctxT(t)
	other := e.ItemLike(t, "lease_other")
	for _, inTx := range []bool{true, false} {
		t.Run(fmt.Sprintf("inTx=%v", inTx), func(t *testing.T) {
			s := fmt.Sprintf("s-%v", inTx)
			r := func(n int) string { return fmt.Sprintf("r%d-%v", n, inTx) }
			e.Insert(t, s)
			newRow := engine.CreateOptions{State: "processing", Set: []engine.Assignment{engine.Set("note", "new")}}
			if !inTx && e.Dialect != engine.Postgres {
				_, _, err := acquireCreate(ctx, e, inTx, engine.NewAcquireOp(e.Lease, s, r(1), 30*time.Second, engine.AcquireOptions{}),
					engine.NewCreateOp(other, r(1), "run", 30*time.Second, newRow))
				require.ErrorIs(t, err, engine.ErrInvalid)
				assert.Nil(t, e.ReadRow(t, s).Token, "nothing was written")
				missing(t, ctx, e, other, r(1))
				return
			}
			ga, gc, err := acquireCreate(ctx, e, inTx, engine.NewAcquireOp(e.Lease, s, r(1), 30*time.Second, engine.AcquireOptions{}),
				engine.NewCreateOp(other, r(1), "run", 30*time.Second, newRow))
			require.NoError(t, err)
			assert.Equal(t, int64(1), ga.Generation)
			assert.Equal(t, int64(1), gc.Generation)
			assert.Equal(t, r(1), ga.Holder)
			assert.True(t, ga.Trusted(time.Now()))
			assert.True(t, gc.Trusted(time.Now()))
			_, err = engine.Verify(ctx, e.Lease, e.DB, ga, false)
			require.NoError(t, err, "the acquire holds")
			_, err = engine.Verify(ctx, other, e.DB, gc, false)
			require.NoError(t, err, "the created row holds")
			row := e.ReadRowOf(t, "lease_other", r(1))
			assert.Equal(t, "processing", row.State)
			require.NotNil(t, row.Note)
			assert.Equal(t, "new", *row.Note)

			// Held: a ConflictError naming the holder; no row inserted.
			_, _, err = acquireCreate(ctx, e, inTx, engine.NewAcquireOp(e.Lease, s, r(2), 30*time.Second, engine.AcquireOptions{}),
				engine.NewCreateOp(other, r(2), "run", 30*time.Second, newRow))
			var ce *engine.ConflictError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, r(1), ce.Holder)
			missing(t, ctx, e, other, r(2))
			// No row to acquire.
			_, _, err = acquireCreate(ctx, e, inTx, engine.NewAcquireOp(e.Lease, "nope", r(3), 30*time.Second, engine.AcquireOptions{}),
				engine.NewCreateOp(other, r(3), "run", 30*time.Second, newRow))
			require.ErrorIs(t, err, engine.ErrNotFound)
			missing(t, ctx, e, other, r(3))
			// Free, but in another state.
			require.NoError(t, e.Lease.Release(ctx, e.DB, ga))
			before := e.ReadRow(t, s)
			_, _, err = acquireCreate(ctx, e, inTx, engine.NewAcquireOp(e.Lease, s, r(4), 30*time.Second, engine.AcquireOptions{InStates: []string{"success"}}),
				engine.NewCreateOp(other, r(4), "run", 30*time.Second, newRow))
			require.ErrorIs(t, err, engine.ErrState)
			missing(t, ctx, e, other, r(4))
			// A duplicate row: the acquire is undone with it.
			_, _, err = acquireCreate(ctx, e, inTx, engine.NewAcquireOp(e.Lease, s, r(5), 30*time.Second, engine.AcquireOptions{}),
				engine.NewCreateOp(other, r(1), "run", 30*time.Second, newRow))
			require.ErrorIs(t, err, engine.ErrExists)
			assert.Equal(t, before, e.ReadRow(t, s), "the acquire was undone")
			_, err = engine.Verify(ctx, other, e.DB, gc, false)
			require.NoError(t, err, "the existing row is untouched")

			// Bad input sends nothing.
			_, _, err = acquireCreate(ctx, e, inTx, engine.NewAcquireOp(e.Lease, s, r(6), 30*time.Second, engine.AcquireOptions{}),
				engine.NewCreateOp(other, r(6), "", 30*time.Second, newRow))
			require.ErrorIs(t, err, engine.ErrInvalid)
			_, _, err = engine.AcquireCreate(ctx, e.DB, engine.AcquireOp[string]{}, engine.NewCreateOp(other, r(6), "run", 30*time.Second, newRow))
			require.ErrorIs(t, err, engine.ErrInvalid)
			assert.Equal(t, before, e.ReadRow(t, s))
			missing(t, ctx, e, other, r(6))
		})
	}
}

// acquireCreateOneWinner: many goroutines acquire one row, each creating
// a row of its own: exactly one wins, and exactly its row is inserted.
func acquireCreateOneWinner(t *testing.T, e Env) {
	ctx := ctxT(t)
	other := e.ItemLike(t, "lease_other")
	e.Insert(t, "hot")
	inTx := e.Dialect != engine.Postgres
	key := func(i int) string { return fmt.Sprintf("r%02d", i) }
	win := oneWinner(t, 16, func(i int) error {
		for attempt := 1; ; attempt++ {
			_, _, err := acquireCreate(ctx, e, inTx, engine.NewAcquireOp(e.Lease, "hot", key(i), 30*time.Second, engine.AcquireOptions{}),
				engine.NewCreateOp(other, key(i), "run", 30*time.Second, engine.CreateOptions{}))
			// A transaction the database rolled back to break a deadlock,
			// or that a multi-primary cluster refused at certification,
			// took no effect: run it again, as every caller of a
			// transaction must (request.Runner does).
			if !engine.IsRetryable(err) || attempt == 20 || !retry.Backoff(ctx, attempt) {
				return err
			}
		}
	})
	st, err := e.Lease.Inspect(ctx, e.DB, "hot")
	require.NoError(t, err)
	assert.Equal(t, key(win), st.Holder)
	var rows int
	require.NoError(t, e.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM lease_other").Scan(&rows))
	assert.Equal(t, 1, rows, "only the winner's row")
}
