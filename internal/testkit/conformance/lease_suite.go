package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// RunLease runs the lease conformance suite on dialect d. Every case opens
// its own database and runs in parallel.
func RunLease(t *testing.T, d engine.Dialect) {
	RunLeaseOn(t, func(t testing.TB) *sqlx.DB { return testdb.Open(t, d) })
}

// RunLeaseOn runs the same suite on databases that open returns, one per
// case: for a second driver of a dialect (mattn/go-sqlite3).
func RunLeaseOn(t *testing.T, open func(t testing.TB) *sqlx.DB) {
	cases := []struct {
		name string
		fn   func(t *testing.T, e Env)
	}{
		{"AcquireFreeRow", acquireFreeRow},
		{"AcquireMissingRow", acquireMissingRow},
		{"ManyGoroutinesOneWinner", manyGoroutinesOneWinner},
		{"Reentry", reentry},
		{"ExpiryAndTakeover", expiryAndTakeover},
		{"GenerationOverTakeovers", generationOverTakeovers},
		{"RolledBackAcquireLeavesNoLease", rolledBackAcquire},
		{"RenewAfterExpiryWithoutTakeover", renewAfterExpiry},
		{"RenewNeverMovesBackwards", renewNeverBackwards},
		{"TransitionStates", transitionStates},
		{"VerifyInsideTransaction", verifyInsideTx},
		{"CreateAndDuplicate", createAndDuplicate},
		{"ReleaseAndReacquire", releaseAndReacquire},
		{"TTLHonoured", ttlHonoured},
		{"BadInputWritesNothing", badInputWritesNothing},
		{"LongTransactionGetsTrueExpiry", longTransactionExpiry},
		{"DeleteIsTokenChecked", deleteIsTokenChecked},
		{"EveryHandleType", everyHandleType},
		{"ManyTakeOverOneExpiredLease", manyTakeOverOneExpired},
		{"StaleGenerationOfReusedTokenIsLost", staleGenerationOfReusedToken},
		{"IntegerKeyZero", integerKeyZero},
		{"JointAllHeld", jointAllHeld},
		{"JointOneLost", jointOneLost},
		{"JointStaleGeneration", jointStaleGeneration},
		{"JointExpiredConfirmIsLost", jointExpired},
		{"JointBadInputWritesNothing", jointBadInput},
		{"FencedJointEnd", fencedJointEnd},
	}
	cases = append(cases, acquireCreateCases...)
	cases = append(cases, confirmPutCases...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := Setup(t, open(t), engine.Options{})
			c.fn(t, e)
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func acquireFreeRow(t *testing.T, e Env) {
	ctx := ctxT(t)
	e.Insert(t, "k")
	g, err := e.Lease.Acquire(ctx, e.DB, "k", "alice", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, int64(1), g.Generation)
	assert.Equal(t, "alice", g.Holder)
	assert.False(t, engine.TokenIsZero(g.Token))
	assert.True(t, g.Trusted(time.Now()))
	st, err := e.Lease.Inspect(ctx, e.DB, "k")
	require.NoError(t, err)
	assert.True(t, st.Held)
	assert.Equal(t, "alice", st.Holder)
	assert.Equal(t, int64(1), st.Generation)
	assert.Greater(t, st.Remaining, 9*time.Second)
	assert.LessOrEqual(t, st.Remaining, 10*time.Second)
	row := e.ReadRow(t, "k")
	require.NotNil(t, row.Token)
	assert.Equal(t, engine.Secret(g.Token), *row.Token)

	_, err = e.Lease.Acquire(ctx, e.DB, "k", "bob", time.Second)
	var ce *engine.ConflictError
	require.ErrorAs(t, err, &ce)
	assert.ErrorIs(t, err, engine.ErrHeld)
	assert.Equal(t, "alice", ce.Holder)
	assert.Equal(t, int64(1), ce.Generation)
	assert.Greater(t, ce.Remaining, 8*time.Second)
	assert.NotContains(t, err.Error(), engine.Secret(g.Token))
	assert.Equal(t, row, e.ReadRow(t, "k"), "a loser changes nothing")
}

func acquireMissingRow(t *testing.T, e Env) {
	_, err := e.Lease.Acquire(ctxT(t), e.DB, "nope", "alice", time.Second)
	assert.ErrorIs(t, err, engine.ErrNotFound)
	_, err = e.Lease.Inspect(ctxT(t), e.DB, "nope")
	assert.ErrorIs(t, err, engine.ErrNotFound)
}

func manyGoroutinesOneWinner(t *testing.T, e Env) {
	ctx := ctxT(t)
	e.Insert(t, "hot")
	holder := func(i int) string { return fmt.Sprintf("h%02d", i) }
	win := oneWinner(t, 64, func(i int) error {
		_, err := e.Lease.Acquire(ctx, e.DB, "hot", holder(i), 30*time.Second)
		return err
	})
	st, err := e.Lease.Inspect(ctx, e.DB, "hot")
	require.NoError(t, err)
	assert.Equal(t, holder(win), st.Holder)
	assert.Equal(t, int64(1), st.Generation)
}

// oneWinner runs try(0) … try(n-1) on n goroutines started together, and
// checks that exactly one succeeds and every other is refused with
// ErrHeld. It returns the winner.
func oneWinner(t *testing.T, n int, try func(i int) error) int {
	t.Helper()
	var (
		wg        sync.WaitGroup
		start     = make(chan struct{})
		mu        sync.Mutex
		wins      []int
		conflicts int
		others    []error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			err := try(i)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins = append(wins, i)
			case errors.Is(err, engine.ErrHeld):
				conflicts++
			default:
				others = append(others, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	require.Empty(t, others)
	require.Len(t, wins, 1, "exactly one winner")
	assert.Equal(t, n-1, conflicts)
	return wins[0]
}

func reentry(t *testing.T, e Env) {
	ctx := ctxT(t)
	e.Insert(t, "k")
	g, err := e.Lease.Acquire(ctx, e.DB, "k", "alice", 5*time.Second)
	require.NoError(t, err)
	for range 3 {
		g2, err := e.Lease.AcquireWith(ctx, e.DB, "k", "alice", 5*time.Second, engine.AcquireOptions{Token: g.Token})
		require.NoError(t, err)
		assert.Equal(t, g.Generation, g2.Generation, "reentry keeps the generation")
		assert.True(t, engine.SameToken(g2.Token, g.Token))
		assert.False(t, g2.Deadline.Before(g.Deadline))
	}
	// Someone else's token is no reentry.
	other, err := engine.NewToken()
	require.NoError(t, err)
	_, err = e.Lease.AcquireWith(ctx, e.DB, "k", "bob", 5*time.Second, engine.AcquireOptions{Token: other})
	assert.ErrorIs(t, err, engine.ErrHeld)
	g3, err := e.Lease.Renew(ctx, e.DB, g, 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, int64(1), g3.Generation, "renew keeps the generation")
}

func expiryAndTakeover(t *testing.T, e Env) {
	ctx := ctxT(t)
	e.Insert(t, "k")
	old, err := e.Lease.Acquire(ctx, e.DB, "k", "old", 200*time.Millisecond)
	require.NoError(t, err)
	_, err = e.Lease.Acquire(ctx, e.DB, "k", "new", time.Second)
	require.ErrorIs(t, err, engine.ErrHeld)
	e.WaitFree(t, "k", 5*time.Second)
	nw, err := e.Lease.Acquire(ctx, e.DB, "k", "new", 30*time.Second)
	require.NoError(t, err)
	assert.Equal(t, old.Generation+1, nw.Generation)
	before := e.ReadRow(t, "k")

	_, err = e.Lease.Renew(ctx, e.DB, old, time.Second)
	assert.ErrorIs(t, err, engine.ErrLost)
	assert.ErrorIs(t, e.Lease.Release(ctx, e.DB, old), engine.ErrLost)
	_, err = e.Lease.Transition(ctx, e.DB, old, engine.ChangeOptions{From: []string{"processing"}, To: "success",
		Set: []engine.Assignment{engine.Set("note", "late")}})
	assert.ErrorIs(t, err, engine.ErrLost)
	_, err = engine.Verify(ctx, e.Lease, e.DB, old, false)
	assert.ErrorIs(t, err, engine.ErrLost)
	_, err = e.Lease.AcquireWith(ctx, e.DB, "k", "old", time.Second, engine.AcquireOptions{Token: old.Token})
	assert.ErrorIs(t, err, engine.ErrHeld)
	assert.Equal(t, before, e.ReadRow(t, "k"), "the new holder's row is unchanged")

	_, err = e.Lease.Renew(ctx, e.DB, nw, 30*time.Second)
	require.NoError(t, err)
}

func generationOverTakeovers(t *testing.T, e Env) {
	ctx := ctxT(t)
	e.Insert(t, "k")
	last := int64(0)
	for i := range 100 {
		g, err := e.Lease.Acquire(ctx, e.DB, "k", fmt.Sprintf("h%d", i), 2*time.Millisecond)
		require.NoError(t, err, "takeover %d", i)
		require.Greater(t, g.Generation, last, "generation strictly increasing")
		last = g.Generation
		e.WaitFree(t, "k", 5*time.Second)
	}
	assert.Equal(t, int64(100), last)
}

func rolledBackAcquire(t *testing.T, e Env) {
	ctx := ctxT(t)
	e.Insert(t, "k")
	tx, err := e.DB.BeginTxx(ctx, nil)
	require.NoError(t, err)
	g, err := e.Lease.Acquire(ctx, tx, "k", "tx", 30*time.Second)
	require.NoError(t, err)
	assert.Equal(t, int64(1), g.Generation)
	require.NoError(t, tx.Rollback())
	st, err := e.Lease.Inspect(ctx, e.DB, "k")
	require.NoError(t, err)
	assert.False(t, st.Held)
	assert.Equal(t, int64(0), st.Generation)
	g2, err := e.Lease.Acquire(ctx, e.DB, "k", "other", time.Second)
	require.NoError(t, err)
	assert.Equal(t, int64(1), g2.Generation)

	// The same inside a committed transaction holds.
	e.Insert(t, "k2")
	tx, err = e.DB.BeginTxx(ctx, nil)
	require.NoError(t, err)
	_, err = e.Lease.Acquire(ctx, tx, "k2", "tx", 30*time.Second)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	st, err = e.Lease.Inspect(ctx, e.DB, "k2")
	require.NoError(t, err)
	assert.True(t, st.Held)
}

func renewAfterExpiry(t *testing.T, e Env) {
	ctx := ctxT(t)
	e.Insert(t, "k")
	g, err := e.Lease.Acquire(ctx, e.DB, "k", "a", 5*time.Millisecond)
	require.NoError(t, err)
	e.WaitFree(t, "k", 5*time.Second)
	g2, err := e.Lease.Renew(ctx, e.DB, g, 10*time.Second)
	require.NoError(t, err, "nobody took it over; the token still matches")
	assert.Equal(t, g.Generation, g2.Generation)
	st, err := e.Lease.Inspect(ctx, e.DB, "k")
	require.NoError(t, err)
	assert.True(t, st.Held)
}

func renewNeverBackwards(t *testing.T, e Env) {
	ctx := ctxT(t)
	e.Insert(t, "k")
	g, err := e.Lease.Acquire(ctx, e.DB, "k", "a", 20*time.Second)
	require.NoError(t, err)
	// A renew for less than what is left keeps the expiry (plus 1µs), and
	// is a success on every dialect and every affected-rows mode.
	for range 5 {
		_, err = e.Lease.Renew(ctx, e.DB, g, time.Second)
		require.NoError(t, err)
	}
	st, err := e.Lease.Inspect(ctx, e.DB, "k")
	require.NoError(t, err)
	assert.Greater(t, st.Remaining, 15*time.Second)
}

func transitionStates(t *testing.T, e Env) {
	ctx := ctxT(t)
	e.Insert(t, "k")
	g, err := e.Lease.AcquireWith(ctx, e.DB, "k", "a", 5*time.Second, engine.AcquireOptions{InStates: []string{"processing"}})
	require.NoError(t, err)
	// Wrong from-state: lost, nothing changed.
	before := e.ReadRow(t, "k")
	_, err = e.Lease.Transition(ctx, e.DB, g, engine.ChangeOptions{From: []string{"error"}, To: "success"})
	assert.ErrorIs(t, err, engine.ErrLost)
	assert.Equal(t, before, e.ReadRow(t, "k"))
	// Keep: state changes, lease renewed, same generation.
	g2, err := e.Lease.Transition(ctx, e.DB, g, engine.ChangeOptions{From: []string{"processing"}, To: "processing",
		Keep: true, TTL: 5 * time.Second, Set: []engine.Assignment{engine.Set("note", "step 1")}})
	require.NoError(t, err)
	assert.Equal(t, g.Generation, g2.Generation)
	// Same values again: still a success (the row changes through its expiry).
	_, err = e.Lease.Transition(ctx, e.DB, g2, engine.ChangeOptions{From: []string{"processing"}, To: "processing",
		Keep: true, TTL: 5 * time.Second, Set: []engine.Assignment{engine.Set("note", "step 1")}})
	require.NoError(t, err)
	// Release into success with a note.
	_, err = e.Lease.Transition(ctx, e.DB, g2, engine.ChangeOptions{From: []string{"processing"}, To: "success",
		Set: []engine.Assignment{engine.Set("note", "done")}})
	require.NoError(t, err)
	row := e.ReadRow(t, "k")
	assert.Equal(t, "success", row.State)
	assert.Nil(t, row.Token)
	assert.Nil(t, row.Holder)
	require.NotNil(t, row.Note)
	assert.Equal(t, "done", *row.Note)
	// A success row cannot be acquired for processing.
	_, err = e.Lease.AcquireWith(ctx, e.DB, "k", "b", time.Second, engine.AcquireOptions{InStates: []string{"processing", "error"}})
	var se *engine.StateError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "success", se.State)
	// The old grant can transition no more.
	_, err = e.Lease.Transition(ctx, e.DB, g2, engine.ChangeOptions{From: []string{"success"}, To: "error"})
	assert.ErrorIs(t, err, engine.ErrLost)
	// An error row is retried: acquire sets processing, generation +1.
	e.Insert(t, "r")
	gr, err := e.Lease.AcquireWith(ctx, e.DB, "r", "a", time.Second, engine.AcquireOptions{})
	require.NoError(t, err)
	_, err = e.Lease.Transition(ctx, e.DB, gr, engine.ChangeOptions{From: []string{"processing"}, To: "error"})
	require.NoError(t, err)
	gr2, err := e.Lease.AcquireWith(ctx, e.DB, "r", "b", time.Second, engine.AcquireOptions{InStates: []string{"error"}, SetState: "processing"})
	require.NoError(t, err)
	assert.Equal(t, gr.Generation+1, gr2.Generation)
	assert.Equal(t, "processing", e.ReadRow(t, "r").State)
}

func verifyInsideTx(t *testing.T, e Env) {
	ctx := ctxT(t)
	e.Insert(t, "k")
	g, err := e.Lease.Acquire(ctx, e.DB, "k", "a", 30*time.Second)
	require.NoError(t, err)
	tx, err := e.DB.BeginTxx(ctx, nil)
	require.NoError(t, err)
	gen, err := engine.Verify(ctx, e.Lease, tx, g, true)
	require.NoError(t, err)
	assert.Equal(t, g.Generation, gen)
	require.NoError(t, tx.Commit())
	require.NoError(t, e.Lease.Release(ctx, e.DB, g))
	_, err = engine.Verify(ctx, e.Lease, e.DB, g, false)
	assert.ErrorIs(t, err, engine.ErrLost)
}

func createAndDuplicate(t *testing.T, e Env) {
	ctx := ctxT(t)
	g, err := e.Lease.Create(ctx, e.DB, "c", "a", 5*time.Second, engine.CreateOptions{State: "processing",
		Set: []engine.Assignment{engine.Set("note", "first")}})
	require.NoError(t, err)
	assert.Equal(t, int64(1), g.Generation)
	before := e.ReadRow(t, "c")
	_, err = e.Lease.Create(ctx, e.DB, "c", "b", 5*time.Second, engine.CreateOptions{State: "processing"})
	assert.ErrorIs(t, err, engine.ErrExists)
	assert.True(t, engine.IsDuplicateKey(err))
	assert.Equal(t, before, e.ReadRow(t, "c"))
	require.NoError(t, e.Lease.Ensure(ctx, e.DB, "c", engine.CreateOptions{}), "ensure on an existing row is a no-op")
	assert.Equal(t, before, e.ReadRow(t, "c"))
	_, err = e.Lease.Renew(ctx, e.DB, g, 5*time.Second)
	require.NoError(t, err)
}

func releaseAndReacquire(t *testing.T, e Env) {
	ctx := ctxT(t)
	e.Insert(t, "k")
	g, err := e.Lease.Acquire(ctx, e.DB, "k", "a", 30*time.Second)
	require.NoError(t, err)
	require.NoError(t, e.Lease.Release(ctx, e.DB, g))
	assert.ErrorIs(t, e.Lease.Release(ctx, e.DB, g), engine.ErrLost, "a second release finds nothing to release")
	st, err := e.Lease.Inspect(ctx, e.DB, "k")
	require.NoError(t, err)
	assert.False(t, st.Held)
	assert.Equal(t, "", st.Holder)
	g2, err := e.Lease.Acquire(ctx, e.DB, "k", "b", 30*time.Second)
	require.NoError(t, err)
	assert.Equal(t, g.Generation+1, g2.Generation)
}

func ttlHonoured(t *testing.T, e Env) {
	ctx := ctxT(t)
	e.Insert(t, "k")
	for _, ttl := range []time.Duration{200 * time.Millisecond, 1500 * time.Millisecond} {
		g, err := e.Lease.Acquire(ctx, e.DB, "k", "a", ttl)
		require.NoError(t, err)
		st, err := e.Lease.Inspect(ctx, e.DB, "k")
		require.NoError(t, err)
		assert.LessOrEqual(t, st.Remaining, ttl, "expiry is at most the TTL away")
		assert.Greater(t, st.Remaining, ttl-150*time.Millisecond, "and not much less (database clock)")
		require.NoError(t, e.Lease.Release(ctx, e.DB, g))
	}
}

// longTransactionExpiry: a lease taken late in a long transaction expires
// TTL after the acquire, not TTL after the transaction began.
func longTransactionExpiry(t *testing.T, e Env) {
	ctx := ctxT(t)
	e.Insert(t, "k")
	tx, err := e.DB.BeginTxx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()                    //nolint:errcheck
	_, err = e.Lease.Inspect(ctx, tx, "k") // the transaction has started
	require.NoError(t, err)
	timer := time.NewTimer(1500 * time.Millisecond)
	<-timer.C
	_, err = e.Lease.Acquire(ctx, tx, "k", "a", 2*time.Second)
	require.NoError(t, err)
	st, err := e.Lease.Inspect(ctx, tx, "k")
	require.NoError(t, err)
	// A transaction-start clock would have left at most 500ms; the
	// statement's clock leaves 2s less the time to the Inspect (a loaded
	// machine may take a good part of a second).
	assert.True(t, st.Held)
	assert.Greater(t, st.Remaining, time.Second)
}

func mustAcquire(t *testing.T, ctx context.Context, l *engine.Lease[int64], db engine.DB, key int64) engine.Grant[int64] {
	t.Helper()
	g, err := l.Acquire(ctx, db, key, "a", 30*time.Second)
	require.NoError(t, err)
	return g
}
