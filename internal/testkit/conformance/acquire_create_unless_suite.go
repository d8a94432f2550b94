package conformance

// The acquire-create-unless cases (listed with the acquire-create cases):
// a lookup and a claim in one (engine.AcquireCreateUnless): the row found
// and read, with nothing written; or, when there is none, AcquireCreate's
// both or neither.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/retry"
)

// unlessRead is what the cases read from an existing row.
type unlessRead struct {
	holder, state sql.NullString
	generation    int64
	note          sql.NullString
}

func (r *unlessRead) dest() []any { return []any{&r.holder, &r.state, &r.generation, &r.note} }

// unlessOf names the row key of the lease_other table and the columns
// unlessRead reads.
func unlessOf(key string) engine.Unless {
	return engine.Unless{Match: []engine.Assignment{engine.Set("item_key", key)},
		Columns: []string{"holder", "state", "generation", "note"}}
}

// acquireCreateUnlessIn runs engine.AcquireCreateUnless on the pool or in
// a transaction of its own (onPoolOrTx).
func acquireCreateUnlessIn(ctx context.Context, e Env, inTx bool, a engine.AcquireOp[string], c engine.CreateOp[string],
	u engine.Unless, dest ...any) (ga engine.Grant[string], gc engine.Grant[string], found bool, err error) {
	err = onPoolOrTx(ctx, e, inTx, func(db engine.DB) (err error) {
		ga, gc, found, err = engine.AcquireCreateUnless(ctx, db, a, c, u, dest...)
		return err
	})
	return ga, gc, found, err
}

// acquireCreateUnless: with no row, the acquire and the insert, as
// AcquireCreate; with the row, the row read into dest and nothing
// written, whether the lease is free or held; bad input sends nothing.
func acquireCreateUnless(t *testing.T, e Env) {
	ctx := ctxT(t)
	other := e.ItemLike(t, "lease_other")
	for _, inTx := range []bool{true, false} {
		t.Run(fmt.Sprintf("inTx=%v", inTx), func(t *testing.T) {
			s := fmt.Sprintf("s-%v", inTx)
			r := func(n int) string { return fmt.Sprintf("r%d-%v", n, inTx) }
			e.Insert(t, s)
			newRow := engine.CreateOptions{State: "processing", Set: []engine.Assignment{engine.Set("note", "new")}}
			try := func(n int, read *unlessRead) (engine.Grant[string], engine.Grant[string], bool, error) {
				return acquireCreateUnlessIn(ctx, e, inTx, engine.NewAcquireOp(e.Lease, s, r(n), 30*time.Second, engine.AcquireOptions{}),
					engine.NewCreateOp(other, r(n), "run", 30*time.Second, newRow), unlessOf(r(n)), read.dest()...)
			}
			var read unlessRead
			if !inTx && e.Dialect != engine.Postgres {
				_, _, _, err := try(1, &read)
				require.ErrorIs(t, err, engine.ErrInvalid, "a pool: MySQL and SQLite need a transaction")
				assert.Nil(t, e.ReadRow(t, s).Token, "nothing was written")
				missing(t, ctx, e, other, r(1))
				return
			}
			// No row: the acquire and the insert.
			ga, gc, found, err := try(1, &read)
			require.NoError(t, err)
			assert.False(t, found)
			assert.Equal(t, int64(1), gc.Generation)
			_, err = engine.Verify(ctx, e.Lease, e.DB, ga, false)
			require.NoError(t, err, "the acquire holds")
			_, err = engine.Verify(ctx, other, e.DB, gc, false)
			require.NoError(t, err, "the created row holds")
			assert.False(t, read.state.Valid, "nothing read")

			// The row exists, the lease held (by r1): read, nothing written.
			held := e.ReadRow(t, s)
			ga2, gc2, found, err := try(1, &read)
			require.NoError(t, err)
			require.True(t, found)
			assert.Zero(t, ga2)
			assert.Zero(t, gc2)
			assert.Equal(t, unlessRead{holder: sql.NullString{String: "run", Valid: true}, state: sql.NullString{String: "processing", Valid: true},
				generation: 1, note: sql.NullString{String: "new", Valid: true}}, read)
			assert.Equal(t, held, e.ReadRow(t, s), "the lease untouched")

			// The row exists, the lease free: still read, nothing taken.
			require.NoError(t, e.Lease.Release(ctx, e.DB, ga))
			free := e.ReadRow(t, s)
			read = unlessRead{}
			_, _, found, err = try(1, &read)
			require.NoError(t, err)
			require.True(t, found)
			assert.Equal(t, "processing", read.state.String)
			assert.Equal(t, free, e.ReadRow(t, s), "the free lease was not taken")
			assert.Equal(t, gc.Generation, e.ReadRowOf(t, "lease_other", r(1)).Generation, "the row untouched")

			// No row, the lease held by another: as AcquireCreate.
			g3, err := e.Lease.Acquire(ctx, e.DB, s, "someone", 30*time.Second)
			require.NoError(t, err)
			_, _, found, err = try(2, &read)
			var ce *engine.ConflictError
			require.ErrorAs(t, err, &ce)
			assert.False(t, found)
			assert.Equal(t, "someone", ce.Holder)
			missing(t, ctx, e, other, r(2))
			require.NoError(t, e.Lease.Release(ctx, e.DB, g3))

			// Bad input sends nothing.
			before := e.ReadRow(t, s)
			bad := []struct {
				name string
				u    engine.Unless
				dest []any
			}{
				{"no match", engine.Unless{Columns: []string{"state"}}, []any{new(string)}},
				{"bad match column", engine.Unless{Match: []engine.Assignment{engine.Set("item_key; --", "x")}, Columns: []string{"state"}}, []any{new(string)}},
				{"match column twice", engine.Unless{Match: []engine.Assignment{engine.Set("item_key", "a"), engine.Set("item_key", "b")}, Columns: []string{"state"}}, []any{new(string)}},
				{"no column", engine.Unless{Match: []engine.Assignment{engine.Set("item_key", r(3))}}, nil},
				{"bad column", engine.Unless{Match: []engine.Assignment{engine.Set("item_key", r(3))}, Columns: []string{"state, token"}}, []any{new(string)}},
				{"the token", engine.Unless{Match: []engine.Assignment{engine.Set("item_key", r(3))}, Columns: []string{"token"}}, []any{new(sql.NullString)}},
				{"fewer destinations", engine.Unless{Match: []engine.Assignment{engine.Set("item_key", r(3))}, Columns: []string{"state", "note"}}, []any{new(string)}},
				{"nil destination", engine.Unless{Match: []engine.Assignment{engine.Set("item_key", r(3))}, Columns: []string{"state"}}, []any{nil}},
			}
			for _, b := range bad {
				_, _, _, err := acquireCreateUnlessIn(ctx, e, inTx, engine.NewAcquireOp(e.Lease, s, r(3), 30*time.Second, engine.AcquireOptions{}),
					engine.NewCreateOp(other, r(3), "run", 30*time.Second, newRow), b.u, b.dest...)
				require.ErrorIs(t, err, engine.ErrInvalid, b.name)
			}
			_, _, _, err = engine.AcquireCreateUnless(ctx, e.DB, engine.AcquireOp[string]{}, engine.NewCreateOp(other, r(3), "run", 30*time.Second, newRow), unlessOf(r(3)), read.dest()...)
			require.ErrorIs(t, err, engine.ErrInvalid)
			assert.Equal(t, before, e.ReadRow(t, s))
			missing(t, ctx, e, other, r(3))
		})
	}
}

// acquireCreateUnlessOneRow: many goroutines make the same lookup-and-
// claim at once, each under a lease row of its own: one row is inserted,
// by one of them, and every other finds it, or meets it as a duplicate
// key (a row inserted after its read), with its own acquire undone.
func acquireCreateUnlessOneRow(t *testing.T, e Env) {
	ctx := ctxT(t)
	other := e.ItemLike(t, "lease_other")
	const n = 16
	for i := range n {
		e.Insert(t, fmt.Sprintf("s%02d", i))
	}
	inTx := e.Dialect != engine.Postgres
	var (
		wg                       sync.WaitGroup
		start                    = make(chan struct{})
		mu                       sync.Mutex
		created, found, conflict int
		others                   []error
		winner                   string
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			s := fmt.Sprintf("s%02d", i)
			var read unlessRead
			var ok bool
			var err error
			for attempt := 1; ; attempt++ {
				_, _, ok, err = acquireCreateUnlessIn(ctx, e, inTx, engine.NewAcquireOp(e.Lease, s, s, 30*time.Second, engine.AcquireOptions{}),
					engine.NewCreateOp(other, "one", s, 30*time.Second, engine.CreateOptions{}), unlessOf("one"), read.dest()...)
				// A deadlock victim or a refused certification took no
				// effect: run it again, as every caller must.
				if !engine.IsRetryable(err) || attempt == 20 || !retry.Backoff(ctx, attempt) {
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && ok:
				found++
			case err == nil:
				created++
				winner = s
			case errors.Is(err, engine.ErrExists):
				conflict++
			default:
				others = append(others, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	require.Empty(t, others)
	require.Equal(t, 1, created, "one insert")
	assert.Equal(t, n-1, found+conflict)
	var rows int
	require.NoError(t, e.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM lease_other").Scan(&rows))
	assert.Equal(t, 1, rows)
	assert.Equal(t, winner, *e.ReadRowOf(t, "lease_other", "one").Holder)
	for i := range n {
		s := fmt.Sprintf("s%02d", i)
		row := e.ReadRow(t, s)
		if s == winner {
			assert.NotNil(t, row.Token, "the winner's lease is held")
			continue
		}
		assert.Nil(t, row.Token, "%s: a loser's acquire was undone or never made", s)
	}
}
