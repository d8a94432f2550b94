package conformance

// Cases of the lease suite about what the lease refuses or tells apart:
// bad input, token-checked deletes, every kind of handle, many takers of
// one expired row, a reused token of an older generation, key zero.

import (
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/countdb"
)

func badInputWritesNothing(t *testing.T, e Env) {
	ctx := ctxT(t)
	e.Insert(t, "k")
	g, err := e.Lease.Acquire(ctx, e.DB, "k", "a", 30*time.Second)
	require.NoError(t, err)
	before := e.ReadRow(t, "k")
	var c countdb.Counter
	db := c.Wrap(e.DB)
	long := strings.Repeat("x", engine.MaxHolderLen+1)
	var nilDB *sql.DB
	zero := engine.Grant[string]{}
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
			_, err := e.Lease.Create(ctx, db, "new ", "b", time.Second, engine.CreateOptions{})
			return err
		},
		"ensure key + space": func() error { return e.Lease.Ensure(ctx, db, "new ", engine.CreateOptions{}) },
		"state + space": func() error {
			_, err := e.Lease.AcquireWith(ctx, db, "k", "b", time.Second, engine.AcquireOptions{SetState: "processing "})
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
			_, err := e.Lease.Transition(ctx, db, g, engine.ChangeOptions{Set: []engine.Assignment{engine.Set("token", "x")}})
			return err
		},
		"set bad ident": func() error {
			_, err := e.Lease.Transition(ctx, db, g, engine.ChangeOptions{Set: []engine.Assignment{engine.Set("note; DROP TABLE x", "x")}})
			return err
		},
		"set twice": func() error {
			_, err := e.Lease.Transition(ctx, db, g, engine.ChangeOptions{Set: []engine.Assignment{engine.Set("note", "x"), engine.Set("note", "y")}})
			return err
		},
		"ttl without keep": func() error {
			_, err := e.Lease.Transition(ctx, db, g, engine.ChangeOptions{TTL: time.Second})
			return err
		},
		"create empty holder": func() error {
			_, err := e.Lease.Create(ctx, db, "new", "", time.Second, engine.CreateOptions{})
			return err
		},
		"verify zero grant": func() error { _, err := engine.Verify(ctx, e.Lease, db, zero, true); return err },
		"inspect empty key": func() error { _, err := e.Lease.Inspect(ctx, db, ""); return err },
	}
	for name, call := range calls {
		err := call()
		var ve *engine.ValidationError
		assert.ErrorAs(t, err, &ve, name)
		assert.ErrorIs(t, err, engine.ErrInvalid, name)
	}
	assert.Zero(t, c.Count(), "no statement was sent")
	assert.Equal(t, before, e.ReadRow(t, "k"), "nothing was written")
	_, err = e.Lease.Inspect(ctx, e.DB, "new")
	assert.ErrorIs(t, err, engine.ErrNotFound)
}

func deleteIsTokenChecked(t *testing.T, e Env) {
	ctx := ctxT(t)
	g, err := e.Lease.Create(ctx, e.DB, "d", "a", 5*time.Millisecond, engine.CreateOptions{})
	require.NoError(t, err)
	e.WaitFree(t, "d", 5*time.Second)
	g2, err := e.Lease.Acquire(ctx, e.DB, "d", "b", 30*time.Second)
	require.NoError(t, err)
	before := e.ReadRow(t, "d")
	assert.ErrorIs(t, e.Lease.Delete(ctx, e.DB, g), engine.ErrLost, "the old holder deletes nothing")
	assert.Equal(t, before, e.ReadRow(t, "d"))
	require.NoError(t, e.Lease.Delete(ctx, e.DB, g2))
	_, err = e.Lease.Inspect(ctx, e.DB, "d")
	assert.ErrorIs(t, err, engine.ErrNotFound)
	assert.ErrorIs(t, e.Lease.Delete(ctx, e.DB, g2), engine.ErrLost)

	// The generation went with the row: the key created again starts at 1
	// (documented on Delete), and the deleted grants hold nothing.
	g3, err := e.Lease.Create(ctx, e.DB, "d", "c", 30*time.Second, engine.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(1), g3.Generation)
	_, err = e.Lease.Renew(ctx, e.DB, g2, time.Second)
	assert.ErrorIs(t, err, engine.ErrLost)
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
		open   func() (engine.DB, func() error)
		commit bool
	}{
		{"*sqlx.DB", func() (engine.DB, func() error) { return e.DB, nil }, false},
		{"*sql.DB", func() (engine.DB, func() error) { return e.DB.DB, nil }, false},
		{"*sql.Conn", func() (engine.DB, func() error) { return conn, nil }, false},
		{"*sql.Tx", func() (engine.DB, func() error) {
			tx, err := e.DB.DB.BeginTx(ctx, nil)
			require.NoError(t, err)
			return tx, tx.Commit
		}, true},
		{"*sqlx.Tx", func() (engine.DB, func() error) {
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
		_, err = engine.Verify(ctx, e.Lease, db, g, h.commit)
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
		require.ErrorIs(t, err, engine.ErrHeld)
	}
	assert.Equal(t, 1, wins)
	for g := range gens {
		assert.Equal(t, dead.Generation+1, g)
	}
	_, err = e.Lease.Renew(ctx, e.DB, dead, time.Second)
	assert.ErrorIs(t, err, engine.ErrLost)
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
	g2, err := e.Lease.AcquireWith(ctx, e.DB, "k", "a", 30*time.Second, engine.AcquireOptions{Token: g1.Token})
	require.NoError(t, err)
	require.Equal(t, g1.Generation+1, g2.Generation, "a reentry that finds the row free is a new grant")
	require.True(t, engine.SameToken(g2.Token, g1.Token))
	before := e.ReadRow(t, "k")

	_, err = e.Lease.Renew(ctx, e.DB, g1, time.Minute)
	assert.ErrorIs(t, err, engine.ErrLost, "renew")
	assert.Equal(t, before, e.ReadRow(t, "k"), "renew changed the row")
	assert.ErrorIs(t, e.Lease.Release(ctx, e.DB, g1), engine.ErrLost, "release")
	assert.Equal(t, before, e.ReadRow(t, "k"), "release changed the row")
	_, err = e.Lease.Transition(ctx, e.DB, g1, engine.ChangeOptions{To: "success", Set: []engine.Assignment{engine.Set("note", "stale")}})
	assert.ErrorIs(t, err, engine.ErrLost, "transition")
	assert.Equal(t, before, e.ReadRow(t, "k"), "transition changed the row")
	_, err = e.Lease.Transition(ctx, e.DB, g1, engine.ChangeOptions{From: []string{"processing"}, Keep: true, TTL: time.Minute})
	assert.ErrorIs(t, err, engine.ErrLost, "transition with keep")
	assert.Equal(t, before, e.ReadRow(t, "k"), "transition with keep changed the row")
	for _, lock := range []bool{false, true} {
		_, err = engine.Verify(ctx, e.Lease, e.DB, g1, lock)
		assert.ErrorIs(t, err, engine.ErrLost, "verify (lock %v)", lock)
	}
	assert.ErrorIs(t, e.Lease.Delete(ctx, e.DB, g1), engine.ErrLost, "delete")
	assert.Equal(t, before, e.ReadRow(t, "k"), "delete changed the row")
	_, err = e.Lease.Confirm(ctx, e.DB, g1)
	assert.ErrorIs(t, err, engine.ErrLost, "confirm")
	assert.Equal(t, before, e.ReadRow(t, "k"), "confirm changed the row")

	// The newer grant is intact and works; a reentry with it keeps its
	// generation.
	gen, err := engine.Verify(ctx, e.Lease, e.DB, g2, false)
	require.NoError(t, err)
	assert.Equal(t, g2.Generation, gen)
	g3, err := e.Lease.AcquireWith(ctx, e.DB, "k", "a", 30*time.Second, engine.AcquireOptions{Token: g2.Token})
	require.NoError(t, err)
	assert.Equal(t, g2.Generation, g3.Generation, "reentry keeps the generation")
	g3, err = e.Lease.Renew(ctx, e.DB, g3, 30*time.Second)
	require.NoError(t, err)
	assert.Equal(t, g2.Generation, g3.Generation)
	g3, err = e.Lease.Transition(ctx, e.DB, g3, engine.ChangeOptions{Keep: true, TTL: 30 * time.Second, Set: []engine.Assignment{engine.Set("note", "current")}})
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
	ddl := map[engine.Dialect]string{
		engine.MySQL: "CREATE TABLE lease_num (id BIGINT NOT NULL PRIMARY KEY, holder VARCHAR(191) NULL, " +
			"token CHAR(36) NULL, expires_at DATETIME(6) NULL, generation BIGINT NOT NULL DEFAULT 0)",
		engine.Postgres: "CREATE TABLE lease_num (id BIGINT NOT NULL PRIMARY KEY, holder VARCHAR(191) NULL, " +
			"token CHAR(36) NULL, expires_at TIMESTAMPTZ NULL, generation BIGINT NOT NULL DEFAULT 0)",
		engine.SQLite: "CREATE TABLE lease_num (id INTEGER NOT NULL PRIMARY KEY, holder TEXT NULL, " +
			"token TEXT NULL, expires_at INTEGER NULL, generation INTEGER NOT NULL DEFAULT 0)",
	}[e.Dialect]
	_, err := e.DB.ExecContext(ctx, ddl)
	require.NoError(t, err)
	l, err := engine.New[int64](e.Dialect, engine.MustTable("lease_num", engine.Columns{
		Key: "id", Holder: "holder", Token: "token", ExpiresAt: "expires_at", Generation: "generation"}), engine.Options{})
	require.NoError(t, err)
	for _, key := range []int64{0, -1} {
		require.NoError(t, l.Ensure(ctx, e.DB, key, engine.CreateOptions{}), "ensure %d", key)
		g, err := l.Acquire(ctx, e.DB, key, "a", 30*time.Second)
		require.NoError(t, err, "acquire %d", key)
		assert.Equal(t, key, g.Key)
		assert.Equal(t, int64(1), g.Generation)
		_, err = l.Acquire(ctx, e.DB, key, "b", 30*time.Second)
		var ce *engine.ConflictError
		require.ErrorAs(t, err, &ce, "key %d", key)
		assert.Equal(t, fmt.Sprint(key), ce.Key)
		g, err = l.Renew(ctx, e.DB, g, 30*time.Second)
		require.NoError(t, err, "renew %d", key)
		_, err = engine.Verify(ctx, l, e.DB, g, false)
		require.NoError(t, err, "verify %d", key)
		st, err := l.Inspect(ctx, e.DB, key)
		require.NoError(t, err, "inspect %d", key)
		assert.True(t, st.Held)
		assert.Equal(t, "a", st.Holder)
		require.NoError(t, l.Release(ctx, e.DB, g), "release %d", key)
		require.NoError(t, l.Delete(ctx, e.DB, mustAcquire(t, ctx, l, e.DB, key)), "delete %d", key)
		g, err = l.Create(ctx, e.DB, key, "c", 30*time.Second, engine.CreateOptions{})
		require.NoError(t, err, "create %d", key)
		assert.Equal(t, int64(1), g.Generation)
	}
}
