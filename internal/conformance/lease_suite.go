package conformance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/countdb"
	"github.com/rowlease/rowlease/internal/testdb"
	"github.com/rowlease/rowlease/lease"
)

// RunLease runs the lease conformance suite on dialect d. Every case opens
// its own database and runs in parallel.
func RunLease(t *testing.T, d lease.Dialect) {
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
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := Setup(t, open(t), lease.Options{})
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
	assert.False(t, g.Token.IsZero())
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
	assert.Equal(t, g.Token.Secret(), *row.Token)

	_, err = e.Lease.Acquire(ctx, e.DB, "k", "bob", time.Second)
	var ce *lease.ConflictError
	require.ErrorAs(t, err, &ce)
	assert.ErrorIs(t, err, lease.ErrHeld)
	assert.Equal(t, "alice", ce.Holder)
	assert.Equal(t, int64(1), ce.Generation)
	assert.Greater(t, ce.Remaining, 8*time.Second)
	assert.NotContains(t, err.Error(), g.Token.Secret())
	assert.Equal(t, row, e.ReadRow(t, "k"), "a loser changes nothing")
}

func acquireMissingRow(t *testing.T, e Env) {
	_, err := e.Lease.Acquire(ctxT(t), e.DB, "nope", "alice", time.Second)
	assert.ErrorIs(t, err, lease.ErrNotFound)
	_, err = e.Lease.Inspect(ctxT(t), e.DB, "nope")
	assert.ErrorIs(t, err, lease.ErrNotFound)
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
			case errors.Is(err, lease.ErrHeld):
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
		g2, err := e.Lease.AcquireWith(ctx, e.DB, "k", "alice", 5*time.Second, lease.AcquireOptions{Token: g.Token})
		require.NoError(t, err)
		assert.Equal(t, g.Generation, g2.Generation, "reentry keeps the generation")
		assert.True(t, g2.Token.Equal(g.Token))
		assert.False(t, g2.Deadline.Before(g.Deadline))
	}
	// Someone else's token is no reentry.
	other, err := lease.NewToken()
	require.NoError(t, err)
	_, err = e.Lease.AcquireWith(ctx, e.DB, "k", "bob", 5*time.Second, lease.AcquireOptions{Token: other})
	assert.ErrorIs(t, err, lease.ErrHeld)
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
	require.ErrorIs(t, err, lease.ErrHeld)
	e.WaitFree(t, "k", 5*time.Second)
	nw, err := e.Lease.Acquire(ctx, e.DB, "k", "new", 30*time.Second)
	require.NoError(t, err)
	assert.Equal(t, old.Generation+1, nw.Generation)
	before := e.ReadRow(t, "k")

	_, err = e.Lease.Renew(ctx, e.DB, old, time.Second)
	assert.ErrorIs(t, err, lease.ErrLost)
	assert.ErrorIs(t, e.Lease.Release(ctx, e.DB, old), lease.ErrLost)
	_, err = e.Lease.Transition(ctx, e.DB, old, lease.ChangeOptions{From: []string{"processing"}, To: "success",
		Set: []lease.Assignment{lease.Set("note", "late")}})
	assert.ErrorIs(t, err, lease.ErrLost)
	_, err = e.Lease.Verify(ctx, e.DB, old, false)
	assert.ErrorIs(t, err, lease.ErrLost)
	_, err = e.Lease.AcquireWith(ctx, e.DB, "k", "old", time.Second, lease.AcquireOptions{Token: old.Token})
	assert.ErrorIs(t, err, lease.ErrHeld)
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
	g, err := e.Lease.AcquireWith(ctx, e.DB, "k", "a", 5*time.Second, lease.AcquireOptions{InStates: []string{"processing"}})
	require.NoError(t, err)
	// Wrong from-state: lost, nothing changed.
	before := e.ReadRow(t, "k")
	_, err = e.Lease.Transition(ctx, e.DB, g, lease.ChangeOptions{From: []string{"error"}, To: "success"})
	assert.ErrorIs(t, err, lease.ErrLost)
	assert.Equal(t, before, e.ReadRow(t, "k"))
	// Keep: state changes, lease renewed, same generation.
	g2, err := e.Lease.Transition(ctx, e.DB, g, lease.ChangeOptions{From: []string{"processing"}, To: "processing",
		Keep: true, TTL: 5 * time.Second, Set: []lease.Assignment{lease.Set("note", "step 1")}})
	require.NoError(t, err)
	assert.Equal(t, g.Generation, g2.Generation)
	// Same values again: still a success (the row changes through its expiry).
	_, err = e.Lease.Transition(ctx, e.DB, g2, lease.ChangeOptions{From: []string{"processing"}, To: "processing",
		Keep: true, TTL: 5 * time.Second, Set: []lease.Assignment{lease.Set("note", "step 1")}})
	require.NoError(t, err)
	// Release into success with a note.
	_, err = e.Lease.Transition(ctx, e.DB, g2, lease.ChangeOptions{From: []string{"processing"}, To: "success",
		Set: []lease.Assignment{lease.Set("note", "done")}})
	require.NoError(t, err)
	row := e.ReadRow(t, "k")
	assert.Equal(t, "success", row.State)
	assert.Nil(t, row.Token)
	assert.Nil(t, row.Holder)
	require.NotNil(t, row.Note)
	assert.Equal(t, "done", *row.Note)
	// A success row cannot be acquired for processing.
	_, err = e.Lease.AcquireWith(ctx, e.DB, "k", "b", time.Second, lease.AcquireOptions{InStates: []string{"processing", "error"}})
	var se *lease.StateError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "success", se.State)
	// The old grant can transition no more.
	_, err = e.Lease.Transition(ctx, e.DB, g2, lease.ChangeOptions{From: []string{"success"}, To: "error"})
	assert.ErrorIs(t, err, lease.ErrLost)
	// An error row is retried: acquire sets processing, generation +1.
	e.Insert(t, "r")
	gr, err := e.Lease.AcquireWith(ctx, e.DB, "r", "a", time.Second, lease.AcquireOptions{})
	require.NoError(t, err)
	_, err = e.Lease.Transition(ctx, e.DB, gr, lease.ChangeOptions{From: []string{"processing"}, To: "error"})
	require.NoError(t, err)
	gr2, err := e.Lease.AcquireWith(ctx, e.DB, "r", "b", time.Second, lease.AcquireOptions{InStates: []string{"error"}, SetState: "processing"})
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
	gen, err := e.Lease.Verify(ctx, tx, g, true)
	require.NoError(t, err)
	assert.Equal(t, g.Generation, gen)
	require.NoError(t, tx.Commit())
	require.NoError(t, e.Lease.Release(ctx, e.DB, g))
	_, err = e.Lease.Verify(ctx, e.DB, g, false)
	assert.ErrorIs(t, err, lease.ErrLost)
}

func createAndDuplicate(t *testing.T, e Env) {
	ctx := ctxT(t)
	g, err := e.Lease.Create(ctx, e.DB, "c", "a", 5*time.Second, lease.CreateOptions{State: "processing",
		Set: []lease.Assignment{lease.Set("note", "first")}})
	require.NoError(t, err)
	assert.Equal(t, int64(1), g.Generation)
	before := e.ReadRow(t, "c")
	_, err = e.Lease.Create(ctx, e.DB, "c", "b", 5*time.Second, lease.CreateOptions{State: "processing"})
	assert.ErrorIs(t, err, lease.ErrExists)
	assert.True(t, lease.IsDuplicateKey(err))
	assert.Equal(t, before, e.ReadRow(t, "c"))
	require.NoError(t, e.Lease.Ensure(ctx, e.DB, "c", lease.CreateOptions{}), "ensure on an existing row is a no-op")
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
	assert.ErrorIs(t, e.Lease.Release(ctx, e.DB, g), lease.ErrLost, "a second release finds nothing to release")
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

func badInputWritesNothing(t *testing.T, e Env) {
	ctx := ctxT(t)
	e.Insert(t, "k")
	g, err := e.Lease.Acquire(ctx, e.DB, "k", "a", 30*time.Second)
	require.NoError(t, err)
	before := e.ReadRow(t, "k")
	var c countdb.Counter
	db := c.Wrap(e.DB)
	long := strings.Repeat("x", lease.MaxHolderLen+1)
	var nilDB *sql.DB
	zero := lease.Grant[string]{}
	noKey := g
	noKey.Key = ""
	calls := map[string]func() error{
		"empty key":    func() error { _, err := e.Lease.Acquire(ctx, db, "", "b", time.Second); return err },
		"long key":     func() error { _, err := e.Lease.Acquire(ctx, db, long, "b", time.Second); return err },
		"empty holder": func() error { _, err := e.Lease.Acquire(ctx, db, "k", "", time.Second); return err },
		"long holder":  func() error { _, err := e.Lease.Acquire(ctx, db, "k", long, time.Second); return err },
		"bad utf8":     func() error { _, err := e.Lease.Acquire(ctx, db, "k", "\xff", time.Second); return err },
		// PostgreSQL cannot store a NUL byte; MySQL's PAD SPACE collations
		// make "k " the same key as "k": refused everywhere instead.
		"NUL in key":     func() error { _, err := e.Lease.Acquire(ctx, db, "k\x00", "b", time.Second); return err },
		"NUL in holder":  func() error { _, err := e.Lease.Acquire(ctx, db, "k", "b\x00", time.Second); return err },
		"key + space":    func() error { _, err := e.Lease.Acquire(ctx, db, "k ", "b", time.Second); return err },
		"holder + space": func() error { _, err := e.Lease.Acquire(ctx, db, "k", "b ", time.Second); return err },
		"create key + space": func() error {
			_, err := e.Lease.Create(ctx, db, "new ", "b", time.Second, lease.CreateOptions{})
			return err
		},
		"ensure key + space": func() error { return e.Lease.Ensure(ctx, db, "new ", lease.CreateOptions{}) },
		"state + space": func() error {
			_, err := e.Lease.AcquireWith(ctx, db, "k", "b", time.Second, lease.AcquireOptions{SetState: "processing "})
			return err
		},
		"zero ttl":       func() error { _, err := e.Lease.Acquire(ctx, db, "k", "b", 0); return err },
		"negative ttl":   func() error { _, err := e.Lease.Acquire(ctx, db, "k", "b", -time.Second); return err },
		"sub-ms ttl":     func() error { _, err := e.Lease.Acquire(ctx, db, "k", "b", 500*time.Microsecond); return err },
		"huge ttl":       func() error { _, err := e.Lease.Acquire(ctx, db, "k", "b", 25*time.Hour); return err },
		"nil db":         func() error { _, err := e.Lease.Acquire(ctx, nil, "k", "b", time.Second); return err },
		"typed nil db":   func() error { _, err := e.Lease.Acquire(ctx, nilDB, "k", "b", time.Second); return err },
		"zero grant":     func() error { _, err := e.Lease.Renew(ctx, db, zero, time.Second); return err },
		"grant no key":   func() error { return e.Lease.Release(ctx, db, noKey) },
		"renew zero ttl": func() error { _, err := e.Lease.Renew(ctx, db, g, 0); return err },
		"set lease col": func() error {
			_, err := e.Lease.Transition(ctx, db, g, lease.ChangeOptions{Set: []lease.Assignment{lease.Set("token", "x")}})
			return err
		},
		"set bad ident": func() error {
			_, err := e.Lease.Transition(ctx, db, g, lease.ChangeOptions{Set: []lease.Assignment{lease.Set("note; DROP TABLE x", "x")}})
			return err
		},
		"set twice": func() error {
			_, err := e.Lease.Transition(ctx, db, g, lease.ChangeOptions{Set: []lease.Assignment{lease.Set("note", "x"), lease.Set("note", "y")}})
			return err
		},
		"ttl without keep": func() error {
			_, err := e.Lease.Transition(ctx, db, g, lease.ChangeOptions{TTL: time.Second})
			return err
		},
		"create empty holder": func() error {
			_, err := e.Lease.Create(ctx, db, "new", "", time.Second, lease.CreateOptions{})
			return err
		},
		"verify zero grant": func() error { _, err := e.Lease.Verify(ctx, db, zero, true); return err },
		"inspect empty key": func() error { _, err := e.Lease.Inspect(ctx, db, ""); return err },
	}
	for name, call := range calls {
		err := call()
		var ve *lease.ValidationError
		assert.ErrorAs(t, err, &ve, name)
		assert.ErrorIs(t, err, lease.ErrInvalid, name)
	}
	assert.Zero(t, c.Count(), "no statement was sent")
	assert.Equal(t, before, e.ReadRow(t, "k"), "nothing was written")
	_, err = e.Lease.Inspect(ctx, e.DB, "new")
	assert.ErrorIs(t, err, lease.ErrNotFound)
}

func deleteIsTokenChecked(t *testing.T, e Env) {
	ctx := ctxT(t)
	g, err := e.Lease.Create(ctx, e.DB, "d", "a", 5*time.Millisecond, lease.CreateOptions{})
	require.NoError(t, err)
	e.WaitFree(t, "d", 5*time.Second)
	g2, err := e.Lease.Acquire(ctx, e.DB, "d", "b", 30*time.Second)
	require.NoError(t, err)
	before := e.ReadRow(t, "d")
	assert.ErrorIs(t, e.Lease.Delete(ctx, e.DB, g), lease.ErrLost, "the old holder deletes nothing")
	assert.Equal(t, before, e.ReadRow(t, "d"))
	require.NoError(t, e.Lease.Delete(ctx, e.DB, g2))
	_, err = e.Lease.Inspect(ctx, e.DB, "d")
	assert.ErrorIs(t, err, lease.ErrNotFound)
	assert.ErrorIs(t, e.Lease.Delete(ctx, e.DB, g2), lease.ErrLost)

	// The generation went with the row: the key created again starts at 1
	// (documented on Delete), and the deleted grants hold nothing.
	g3, err := e.Lease.Create(ctx, e.DB, "d", "c", 30*time.Second, lease.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(1), g3.Generation)
	_, err = e.Lease.Renew(ctx, e.DB, g2, time.Second)
	assert.ErrorIs(t, err, lease.ErrLost)
}

// everyHandleType runs acquire, renew, inspect and release through each
// kind of handle the DB interface is meant for.
func everyHandleType(t *testing.T, e Env) {
	ctx := ctxT(t)
	conn, err := e.DB.DB.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	handles := []struct {
		name   string
		open   func() (lease.DB, func() error)
		commit bool
	}{
		{"*sqlx.DB", func() (lease.DB, func() error) { return e.DB, nil }, false},
		{"*sql.DB", func() (lease.DB, func() error) { return e.DB.DB, nil }, false},
		{"*sql.Conn", func() (lease.DB, func() error) { return conn, nil }, false},
		{"*sql.Tx", func() (lease.DB, func() error) {
			tx, err := e.DB.DB.BeginTx(ctx, nil)
			require.NoError(t, err)
			return tx, tx.Commit
		}, true},
		{"*sqlx.Tx", func() (lease.DB, func() error) {
			tx, err := e.DB.BeginTxx(ctx, nil)
			require.NoError(t, err)
			return tx, tx.Commit
		}, true},
	}
	for i, h := range handles {
		key := fmt.Sprintf("h%d", i)
		e.Insert(t, key)
		db, commit := h.open()
		g, err := e.Lease.Acquire(ctx, db, key, "a", 30*time.Second)
		require.NoError(t, err, h.name)
		g, err = e.Lease.Renew(ctx, db, g, 30*time.Second)
		require.NoError(t, err, h.name)
		st, err := e.Lease.Inspect(ctx, db, key)
		require.NoError(t, err, h.name)
		assert.True(t, st.Held, h.name)
		_, err = e.Lease.Verify(ctx, db, g, h.commit)
		require.NoError(t, err, h.name)
		require.NoError(t, e.Lease.Release(ctx, db, g), h.name)
		if commit != nil {
			require.NoError(t, commit(), h.name)
		}
		st, err = e.Lease.Inspect(ctx, e.DB, key)
		require.NoError(t, err, h.name)
		assert.False(t, st.Held, h.name)
		assert.Equal(t, int64(1), st.Generation, h.name)
	}
}

// manyTakeOverOneExpired: an expired lease taken over by many goroutines at
// once still has exactly one new holder, with generation +1.
func manyTakeOverOneExpired(t *testing.T, e Env) {
	ctx := ctxT(t)
	e.Insert(t, "x")
	dead, err := e.Lease.Acquire(ctx, e.DB, "x", "dead", 2*time.Millisecond)
	require.NoError(t, err)
	e.WaitFree(t, "x", 5*time.Second)
	const n = 32
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make(chan error, n)
	gens := make(chan int64, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			g, err := e.Lease.Acquire(ctx, e.DB, "x", fmt.Sprintf("t%02d", i), 30*time.Second)
			if err == nil {
				gens <- g.Generation
			}
			results <- err
		}()
	}
	close(start)
	wg.Wait()
	close(results)
	close(gens)
	wins := 0
	for err := range results {
		if err == nil {
			wins++
			continue
		}
		require.ErrorIs(t, err, lease.ErrHeld)
	}
	assert.Equal(t, 1, wins)
	for g := range gens {
		assert.Equal(t, dead.Generation+1, g)
	}
	_, err = e.Lease.Renew(ctx, e.DB, dead, time.Second)
	assert.ErrorIs(t, err, lease.ErrLost)
}

// staleGenerationOfReusedToken: a token can be granted again (a reentry
// with AcquireOptions.Token that finds the row free is a new grant,
// generation+1, under the same token). A copy of the earlier grant is
// stale: every token-checked operation with it is lost and changes
// nothing, and the newer grant still holds.
func staleGenerationOfReusedToken(t *testing.T, e Env) {
	ctx := ctxT(t)
	e.Insert(t, "k")
	g1, err := e.Lease.Acquire(ctx, e.DB, "k", "a", 30*time.Second)
	require.NoError(t, err)
	require.NoError(t, e.Lease.Release(ctx, e.DB, g1))
	g2, err := e.Lease.AcquireWith(ctx, e.DB, "k", "a", 30*time.Second, lease.AcquireOptions{Token: g1.Token})
	require.NoError(t, err)
	require.Equal(t, g1.Generation+1, g2.Generation, "a reentry that finds the row free is a new grant")
	require.True(t, g2.Token.Equal(g1.Token))
	before := e.ReadRow(t, "k")

	_, err = e.Lease.Renew(ctx, e.DB, g1, time.Minute)
	assert.ErrorIs(t, err, lease.ErrLost, "renew")
	assert.Equal(t, before, e.ReadRow(t, "k"), "renew changed the row")
	assert.ErrorIs(t, e.Lease.Release(ctx, e.DB, g1), lease.ErrLost, "release")
	assert.Equal(t, before, e.ReadRow(t, "k"), "release changed the row")
	_, err = e.Lease.Transition(ctx, e.DB, g1, lease.ChangeOptions{To: "success", Set: []lease.Assignment{lease.Set("note", "stale")}})
	assert.ErrorIs(t, err, lease.ErrLost, "transition")
	assert.Equal(t, before, e.ReadRow(t, "k"), "transition changed the row")
	_, err = e.Lease.Transition(ctx, e.DB, g1, lease.ChangeOptions{From: []string{"processing"}, Keep: true, TTL: time.Minute})
	assert.ErrorIs(t, err, lease.ErrLost, "transition with keep")
	assert.Equal(t, before, e.ReadRow(t, "k"), "transition with keep changed the row")
	for _, lock := range []bool{false, true} {
		_, err = e.Lease.Verify(ctx, e.DB, g1, lock)
		assert.ErrorIs(t, err, lease.ErrLost, "verify (lock %v)", lock)
	}
	assert.ErrorIs(t, e.Lease.Delete(ctx, e.DB, g1), lease.ErrLost, "delete")
	assert.Equal(t, before, e.ReadRow(t, "k"), "delete changed the row")
	_, err = e.Lease.Confirm(ctx, e.DB, g1)
	assert.ErrorIs(t, err, lease.ErrLost, "confirm")
	assert.Equal(t, before, e.ReadRow(t, "k"), "confirm changed the row")

	// The newer grant is intact and works; a reentry with it keeps its
	// generation.
	gen, err := e.Lease.Verify(ctx, e.DB, g2, false)
	require.NoError(t, err)
	assert.Equal(t, g2.Generation, gen)
	g3, err := e.Lease.AcquireWith(ctx, e.DB, "k", "a", 30*time.Second, lease.AcquireOptions{Token: g2.Token})
	require.NoError(t, err)
	assert.Equal(t, g2.Generation, g3.Generation, "reentry keeps the generation")
	g3, err = e.Lease.Renew(ctx, e.DB, g3, 30*time.Second)
	require.NoError(t, err)
	assert.Equal(t, g2.Generation, g3.Generation)
	g3, err = e.Lease.Transition(ctx, e.DB, g3, lease.ChangeOptions{Keep: true, TTL: 30 * time.Second, Set: []lease.Assignment{lease.Set("note", "current")}})
	require.NoError(t, err)
	require.NoError(t, e.Lease.Release(ctx, e.DB, g3))
	row := e.ReadRow(t, "k")
	assert.Nil(t, row.Token)
	require.NotNil(t, row.Note)
	assert.Equal(t, "current", *row.Note)
}

// integerKeyZero: an integer key of 0 (or a negative one) is a key like
// any other — 0 is a valid primary key on every dialect.
func integerKeyZero(t *testing.T, e Env) {
	ctx := ctxT(t)
	ddl := map[lease.Dialect]string{
		lease.MySQL: "CREATE TABLE lease_num (id BIGINT NOT NULL PRIMARY KEY, holder VARCHAR(191) NULL, " +
			"token CHAR(36) NULL, expires_at DATETIME(6) NULL, generation BIGINT NOT NULL DEFAULT 0)",
		lease.Postgres: "CREATE TABLE lease_num (id BIGINT NOT NULL PRIMARY KEY, holder VARCHAR(191) NULL, " +
			"token CHAR(36) NULL, expires_at TIMESTAMPTZ NULL, generation BIGINT NOT NULL DEFAULT 0)",
		lease.SQLite: "CREATE TABLE lease_num (id INTEGER NOT NULL PRIMARY KEY, holder TEXT NULL, " +
			"token TEXT NULL, expires_at INTEGER NULL, generation INTEGER NOT NULL DEFAULT 0)",
	}[e.Dialect]
	_, err := e.DB.ExecContext(ctx, ddl)
	require.NoError(t, err)
	l, err := lease.New[int64](e.Dialect, lease.MustTable("lease_num", lease.Columns{
		Key: "id", Holder: "holder", Token: "token", ExpiresAt: "expires_at", Generation: "generation"}), lease.Options{})
	require.NoError(t, err)
	for _, key := range []int64{0, -1} {
		require.NoError(t, l.Ensure(ctx, e.DB, key, lease.CreateOptions{}), "ensure %d", key)
		g, err := l.Acquire(ctx, e.DB, key, "a", 30*time.Second)
		require.NoError(t, err, "acquire %d", key)
		assert.Equal(t, key, g.Key)
		assert.Equal(t, int64(1), g.Generation)
		_, err = l.Acquire(ctx, e.DB, key, "b", 30*time.Second)
		var ce *lease.ConflictError
		require.ErrorAs(t, err, &ce, "key %d", key)
		assert.Equal(t, fmt.Sprint(key), ce.Key)
		g, err = l.Renew(ctx, e.DB, g, 30*time.Second)
		require.NoError(t, err, "renew %d", key)
		_, err = l.Verify(ctx, e.DB, g, false)
		require.NoError(t, err, "verify %d", key)
		st, err := l.Inspect(ctx, e.DB, key)
		require.NoError(t, err, "inspect %d", key)
		assert.True(t, st.Held)
		assert.Equal(t, "a", st.Holder)
		require.NoError(t, l.Release(ctx, e.DB, g), "release %d", key)
		require.NoError(t, l.Delete(ctx, e.DB, mustAcquire(t, ctx, l, e.DB, key)), "delete %d", key)
		g, err = l.Create(ctx, e.DB, key, "c", 30*time.Second, lease.CreateOptions{})
		require.NoError(t, err, "create %d", key)
		assert.Equal(t, int64(1), g.Generation)
	}
}

func mustAcquire(t *testing.T, ctx context.Context, l *lease.Lease[int64], db lease.DB, key int64) lease.Grant[int64] {
	t.Helper()
	g, err := l.Acquire(ctx, db, key, "a", 30*time.Second)
	require.NoError(t, err)
	return g
}
