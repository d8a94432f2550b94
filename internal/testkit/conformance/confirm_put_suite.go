package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
)

// confirmPutCases are the ConfirmPut cases of the lease suite.
var confirmPutCases = []struct {
	name string
	fn   func(t *testing.T, e Env)
}{
	{"ConfirmPutHeld", confirmPutHeld},
	{"ConfirmPutLost", confirmPutLost},
	{"ConfirmPutBadInputWritesNothing", confirmPutBadInput},
	{"ConfirmPutStaleAgainstTakeover", confirmPutStaleAgainstTakeover},
}

// journalDDL is a journal table of the caller's: rows appended under the
// item lease.
var journalDDL = map[engine.Dialect]string{
	engine.MySQL: "CREATE TABLE lease_journal (item_key VARCHAR(191) NOT NULL, seq INT NOT NULL, body LONGTEXT NOT NULL, " +
		"PRIMARY KEY (item_key, seq)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
	engine.Postgres: "CREATE TABLE lease_journal (item_key VARCHAR(191) NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL, " +
		"PRIMARY KEY (item_key, seq))",
	engine.SQLite: "CREATE TABLE lease_journal (item_key TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL, " +
		"PRIMARY KEY (item_key, seq))",
}

func journal(t *testing.T, e Env) {
	t.Helper()
	_, err := e.DB.ExecContext(ctxT(t), journalDDL[e.Dialect])
	require.NoError(t, err)
}

func journalRow(key string, seq int, body string) engine.Row {
	return engine.Row{Table: "lease_journal", Key: []string{"item_key", "seq"},
		Columns: []string{"item_key", "seq", "body"}, Values: []any{key, seq, body}}
}

// journalBodies reads the journal of key, in order.
func journalBodies(t *testing.T, e Env, key string) []string {
	t.Helper()
	var out []string
	require.NoError(t, e.DB.SelectContext(ctxT(t), &out, e.DB.Rebind("SELECT body FROM lease_journal WHERE item_key = ? ORDER BY seq"), key))
	return out
}

func confirmPutHeld(t *testing.T, e Env) {
	ctx := ctxT(t)
	journal(t, e)
	e.Insert(t, "k")
	g, err := e.Lease.Acquire(ctx, e.DB, "k", "alice", 10*time.Second)
	require.NoError(t, err)
	for i := range 3 {
		require.NoError(t, engine.ConfirmPut(ctx, e.Lease, e.DB, g, journalRow("k", i, fmt.Sprintf(`{"n":%d}`, i))))
	}
	// The same key again replaces the row (a write whose outcome was
	// unknown, made again).
	require.NoError(t, engine.ConfirmPut(ctx, e.Lease, e.DB, g, journalRow("k", 2, `"again"`)))
	assert.Equal(t, []string{`{"n":0}`, `{"n":1}`, `"again"`}, journalBodies(t, e, "k"))
	// The lease is still held, with the same generation.
	_, err = e.Lease.Renew(ctx, e.DB, g, 10*time.Second)
	require.NoError(t, err)
}

func confirmPutLost(t *testing.T, e Env) {
	ctx := ctxT(t)
	journal(t, e)
	e.Insert(t, "k")
	old, err := e.Lease.Acquire(ctx, e.DB, "k", "old", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, e.Lease.Release(ctx, e.DB, old))
	nw, err := e.Lease.Acquire(ctx, e.DB, "k", "new", 10*time.Second)
	require.NoError(t, err)
	before := e.ReadRow(t, "k")
	err = engine.ConfirmPut(ctx, e.Lease, e.DB, old, journalRow("k", 0, `"stale"`))
	require.ErrorIs(t, err, engine.ErrLost)
	var lost *engine.LostError
	require.ErrorAs(t, err, &lost)
	assert.NotContains(t, err.Error(), engine.Secret(old.Token), "the token is a secret")
	assert.Empty(t, journalBodies(t, e, "k"), "a stale holder writes nothing")
	assert.Equal(t, before, e.ReadRow(t, "k"), "the new holder's row is unchanged")
	require.NoError(t, engine.ConfirmPut(ctx, e.Lease, e.DB, nw, journalRow("k", 0, `"new"`)))
	assert.Equal(t, []string{`"new"`}, journalBodies(t, e, "k"))

	// An expired lease is lost too, though nobody took it.
	e.Insert(t, "x")
	exp, err := e.Lease.Acquire(ctx, e.DB, "x", "x", 150*time.Millisecond)
	require.NoError(t, err)
	e.WaitFree(t, "x", 5*time.Second)
	require.ErrorIs(t, engine.ConfirmPut(ctx, e.Lease, e.DB, exp, journalRow("x", 0, `"late"`)), engine.ErrLost)
	assert.Empty(t, journalBodies(t, e, "x"))
}

func confirmPutBadInput(t *testing.T, e Env) {
	ctx := ctxT(t)
	journal(t, e)
	e.Insert(t, "k")
	g, err := e.Lease.Acquire(ctx, e.DB, "k", "alice", 10*time.Second)
	require.NoError(t, err)
	good := journalRow("k", 0, "x")
	bad := map[string]engine.Row{
		"no table":            {Key: good.Key, Columns: good.Columns, Values: good.Values},
		"bad table":           {Table: "lease_journal; DROP TABLE lease_item", Key: good.Key, Columns: good.Columns, Values: good.Values},
		"no columns":          {Table: good.Table, Key: good.Key},
		"values short":        {Table: good.Table, Key: good.Key, Columns: good.Columns, Values: good.Values[:2]},
		"bad column":          {Table: good.Table, Key: good.Key, Columns: []string{"item_key", "seq", "body x"}, Values: good.Values},
		"column twice":        {Table: good.Table, Key: good.Key, Columns: []string{"item_key", "seq", "seq"}, Values: good.Values},
		"no key":              {Table: good.Table, Columns: good.Columns, Values: good.Values},
		"key not column":      {Table: good.Table, Key: []string{"other"}, Columns: good.Columns, Values: good.Values},
		"key is every column": {Table: good.Table, Key: good.Columns, Columns: good.Columns, Values: good.Values},
	}
	before := e.ReadRow(t, "k")
	for name, row := range bad {
		err := engine.ConfirmPut(ctx, e.Lease, e.DB, g, row)
		var ve *engine.ValidationError
		assert.True(t, errors.As(err, &ve), "%s: %v", name, err)
		assert.ErrorIs(t, err, engine.ErrInvalid, name)
	}
	var nilDB engine.DB
	assert.ErrorIs(t, engine.ConfirmPut(ctx, e.Lease, nilDB, g, good), engine.ErrInvalid)
	assert.Empty(t, journalBodies(t, e, "k"))
	assert.Equal(t, before, e.ReadRow(t, "k"))
}

// confirmPutStaleAgainstTakeover races a stale holder's puts against a
// takeover of its expired lease: every put either lands before the
// takeover (and the new holder sees it when it reads the journal after
// taking over) or is refused; none lands after.
func confirmPutStaleAgainstTakeover(t *testing.T, e Env) {
	ctx := ctxT(t)
	journal(t, e)
	e.Insert(t, "k")
	old, err := e.Lease.Acquire(ctx, e.DB, "k", "old", 300*time.Millisecond)
	require.NoError(t, err)
	// Each put renews the lease for the grant's TTL (on PostgreSQL and
	// MySQL): a short one lets the lease lapse between two puts, so the
	// takeover lands while the stale holder is still putting.
	old.TTL = 20 * time.Millisecond
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var mu sync.Mutex
	var written []int
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Bounded: puts that each renew the lease can keep it alive for
		// as long as they come faster than its TTL; after the last, it
		// lapses and the takeover lands whatever the timing.
		for i := 0; i < 300; i++ {
			select {
			case <-stop:
				return
			default:
			}
			err := engine.ConfirmPut(context.Background(), e.Lease, e.DB, old, journalRow("k", i, `"old"`))
			if err == nil {
				mu.Lock()
				written = append(written, i)
				mu.Unlock()
				continue
			}
			if errors.Is(err, engine.ErrLost) {
				return
			}
			if engine.IsTransient(err) {
				continue
			}
			t.Errorf("put %d: %v", i, err)
			return
		}
	}()
	var nw engine.Grant[string]
	for {
		nw, err = e.Lease.Acquire(ctx, e.DB, "k", "new", 30*time.Second)
		if err == nil {
			break
		}
		require.ErrorIs(t, err, engine.ErrHeld)
	}
	seen := journalBodies(t, e, "k")
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, seen, len(written), "every put the stale holder was told of was there when the new holder took over, and none came after")
	assert.Equal(t, seen, journalBodies(t, e, "k"))
	require.NoError(t, engine.ConfirmPut(ctx, e.Lease, e.DB, nw, journalRow("k", len(seen), `"new"`)))
}
