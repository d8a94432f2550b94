package conformance

// The joint cases: token-checked writes on rows of several tables made
// together (engine.Joint: one statement on PostgreSQL and MySQL, one by one
// on SQLite; the end of engine.RunFenced: one statement on PostgreSQL, one
// by one elsewhere), each held or lost exactly as it would be alone.

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
)

// ItemLike creates a table made like the item table under another name
// and returns a Lease on it (read its rows with ReadRowOf).
func (e Env) ItemLike(t testing.TB, table string) *engine.Lease[string] {
	t.Helper()
	ddl := strings.Replace(ItemDDL[e.Dialect], "CREATE TABLE "+ItemTable+" ", "CREATE TABLE "+table+" ", 1)
	if _, err := e.DB.ExecContext(context.Background(), ddl); err != nil {
		t.Fatalf("create %s: %v", table, err)
	}
	l, err := engine.New[string](e.Dialect, engine.MustTable(table, ItemColumns), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// jointEnv holds a row on each of three tables: a on the item table, b
// on lease_other, c on lease_third.
type jointEnv struct {
	Env
	other, third *engine.Lease[string]
	a, b, c      engine.Grant[string]
}

func newJointEnv(t *testing.T, e Env) *jointEnv {
	t.Helper()
	ctx := ctxT(t)
	j := &jointEnv{Env: e, other: e.ItemLike(t, "lease_other"), third: e.ItemLike(t, "lease_third")}
	j.a = ensureAcquire(t, ctx, e.Lease, e.DB, "a")
	j.b = ensureAcquire(t, ctx, j.other, e.DB, "b")
	j.c = ensureAcquire(t, ctx, j.third, e.DB, "c")
	return j
}

func ensureAcquire(t *testing.T, ctx context.Context, l *engine.Lease[string], db engine.DB, key string) engine.Grant[string] {
	t.Helper()
	require.NoError(t, l.Ensure(ctx, db, key, engine.CreateOptions{}))
	g, err := l.Acquire(ctx, db, key, "holder-"+key, 30*time.Second)
	require.NoError(t, err)
	return g
}

// rows reads a, b and c.
func (j *jointEnv) rows(t *testing.T) [3]Row {
	t.Helper()
	return [3]Row{j.ReadRow(t, "a"), j.ReadRowOf(t, "lease_other", "b"), j.ReadRowOf(t, "lease_third", "c")}
}

// takeOverB makes b's grant stale: released, and taken by another holder.
func (j *jointEnv) takeOverB(t *testing.T) engine.Grant[string] {
	t.Helper()
	ctx := ctxT(t)
	require.NoError(t, j.other.Release(ctx, j.DB, j.b))
	g, err := j.other.Acquire(ctx, j.DB, "b", "thief", 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, j.b.Generation+1, g.Generation)
	return g
}

var done = engine.ChangeOptions{From: []string{"processing"}, To: "success", Set: []engine.Assignment{engine.Set("note", "done")}}

// jointAllHeld: every grant holds, so every write is made: a confirmed
// (renewed, its row changed, still held), b marked success and freed, c
// released.
func jointAllHeld(t *testing.T, e Env) {
	ctx := ctxT(t)
	j := newJointEnv(t, e)
	before := j.rows(t)
	errs := engine.Joint(ctx, e.DB, engine.ConfirmOp(e.Lease, j.a), engine.TransitionOp(j.other, j.b, done), engine.ReleaseOp(j.third, j.c))
	require.Equal(t, []error{nil, nil, nil}, errs)
	after := j.rows(t)

	assert.Equal(t, before[0].Token, after[0].Token)
	assert.Equal(t, before[0].Generation, after[0].Generation)
	assert.NotEqual(t, before[0].Expires, after[0].Expires, "a confirmation always changes its row")
	_, err := engine.Verify(ctx, e.Lease, e.DB, j.a, false)
	assert.NoError(t, err, "a still holds")

	assert.Nil(t, after[1].Token)
	assert.Nil(t, after[1].Holder)
	assert.Equal(t, "success", after[1].State)
	require.NotNil(t, after[1].Note)
	assert.Equal(t, "done", *after[1].Note)
	assert.Equal(t, before[1].Generation, after[1].Generation)

	assert.Nil(t, after[2].Token)
	assert.Equal(t, "processing", after[2].State)
	assert.Equal(t, before[2].Generation, after[2].Generation)

	// Inside a transaction of the caller's, too.
	b2 := ensureAcquire(t, ctx, j.other, e.DB, "b2")
	tx, err := e.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	errs = engine.Joint(ctx, tx, engine.ConfirmOp(e.Lease, j.a), engine.ReleaseOp(j.other, b2))
	require.Equal(t, []error{nil, nil}, errs)
	require.NoError(t, tx.Commit())
	assert.Nil(t, j.ReadRowOf(t, "lease_other", "b2").Token)
}

// jointOneLost: b was taken over. Its write is lost and changes nothing;
// the others are made, as each would be alone.
func jointOneLost(t *testing.T, e Env) {
	ctx := ctxT(t)
	j := newJointEnv(t, e)
	thief := j.takeOverB(t)
	before := j.rows(t)
	errs := engine.Joint(ctx, e.DB, engine.ConfirmOp(e.Lease, j.a), engine.TransitionOp(j.other, j.b, done), engine.ReleaseOp(j.third, j.c))
	require.Len(t, errs, 3)
	assert.NoError(t, errs[0])
	var le *engine.LostError
	require.ErrorAs(t, errs[1], &le)
	assert.Equal(t, "b", le.Key)
	assert.Equal(t, "transition", le.Op)
	assert.NotContains(t, errs[1].Error(), engine.Secret(j.b.Token))
	assert.NotContains(t, errs[1].Error(), engine.Secret(thief.Token))
	assert.NoError(t, errs[2])
	after := j.rows(t)
	assert.Equal(t, before[1], after[1], "the lost write changed nothing")
	assert.NotEqual(t, before[0].Expires, after[0].Expires, "a was confirmed")
	assert.Nil(t, after[2].Token, "c was released")
	_, err := engine.Verify(ctx, j.other, e.DB, thief, false)
	assert.NoError(t, err, "the new holder still holds b")

	// Each kind of write, lost on its own.
	for name, op := range map[string]engine.JointOp{
		"confirm": engine.ConfirmOp(j.other, j.b), "transition": engine.TransitionOp(j.other, j.b, engine.ChangeOptions{Keep: true, TTL: time.Minute}),
		"release": engine.ReleaseOp(j.other, j.b),
	} {
		errs := engine.Joint(ctx, e.DB, engine.ConfirmOp(e.Lease, j.a), op)
		assert.NoError(t, errs[0], name)
		require.ErrorAs(t, errs[1], &le, name)
		assert.Equal(t, name, le.Op)
		assert.Equal(t, after[1], j.ReadRowOf(t, "lease_other", "b"), name)
	}
}

// jointStaleGeneration: a's token was granted again (a reentry that found
// the row free: generation+1). A copy of the earlier grant is lost in a
// joint write as alone, and changes nothing; the newer grant holds.
func jointStaleGeneration(t *testing.T, e Env) {
	ctx := ctxT(t)
	j := newJointEnv(t, e)
	require.NoError(t, e.Lease.Release(ctx, e.DB, j.a))
	newer, err := e.Lease.AcquireWith(ctx, e.DB, "a", "holder-a", 30*time.Second, engine.AcquireOptions{Token: j.a.Token})
	require.NoError(t, err)
	require.Equal(t, j.a.Generation+1, newer.Generation)
	before := e.ReadRow(t, "a")
	for name, op := range map[string]engine.JointOp{
		"confirm": engine.ConfirmOp(e.Lease, j.a), "transition": engine.TransitionOp(e.Lease, j.a, done), "release": engine.ReleaseOp(e.Lease, j.a),
	} {
		errs := engine.Joint(ctx, e.DB, op, engine.ConfirmOp(j.other, j.b))
		var le *engine.LostError
		require.ErrorAs(t, errs[0], &le, name)
		assert.Equal(t, name, le.Op)
		assert.NoError(t, errs[1], name)
		assert.Equal(t, before, e.ReadRow(t, "a"), "%s: the stale write changed the row", name)
	}
	_, err = engine.Verify(ctx, e.Lease, e.DB, newer, false)
	assert.NoError(t, err)
}

// jointExpired: a's lease expired and nobody took it over. A confirmation
// is lost (it requires expires_at after the database's now, as Confirm
// does); a transition is made (Transition checks token and generation
// only).
func jointExpired(t *testing.T, e Env) {
	ctx := ctxT(t)
	j := newJointEnv(t, e)
	require.NoError(t, e.Lease.Release(ctx, e.DB, j.a))
	var err error
	j.a, err = e.Lease.Acquire(ctx, e.DB, "a", "holder-a", 200*time.Millisecond)
	require.NoError(t, err)
	e.WaitFree(t, "a", 5*time.Second)
	before := e.ReadRow(t, "a")
	errs := engine.Joint(ctx, e.DB, engine.ConfirmOp(e.Lease, j.a), engine.ConfirmOp(j.other, j.b))
	assert.ErrorIs(t, errs[0], engine.ErrLost)
	assert.NoError(t, errs[1])
	assert.Equal(t, before, e.ReadRow(t, "a"))
	errs = engine.Joint(ctx, e.DB, engine.TransitionOp(e.Lease, j.a, done), engine.ReleaseOp(j.other, j.b))
	assert.Equal(t, []error{nil, nil}, errs)
	assert.Equal(t, "success", e.ReadRow(t, "a").State)
}

// jointBadInput: bad input sends nothing: every entry is an ErrInvalid
// and no row changes.
func jointBadInput(t *testing.T, e Env) {
	ctx := ctxT(t)
	j := newJointEnv(t, e)
	before := j.rows(t)
	cases := map[string][]engine.JointOp{
		"zero op":     {engine.JointOp{}, engine.ConfirmOp(j.other, j.b)},
		"one row":     {engine.ConfirmOp(e.Lease, j.a), engine.ReleaseOp(e.Lease, j.a)},
		"lease col":   {engine.ConfirmOp(j.other, j.b), engine.TransitionOp(e.Lease, j.a, engine.ChangeOptions{Set: []engine.Assignment{engine.Set("token", "x")}})},
		"keep no ttl": {engine.ReleaseOp(j.other, j.b), engine.TransitionOp(e.Lease, j.a, engine.ChangeOptions{Keep: true})},
		"zero token":  {engine.ReleaseOp(j.other, j.b), engine.ReleaseOp(e.Lease, engine.Grant[string]{Key: "a", Generation: 1})},
	}
	for name, ops := range cases {
		errs := engine.Joint(ctx, e.DB, ops...)
		require.Len(t, errs, len(ops), name)
		for i, err := range errs {
			assert.ErrorIs(t, err, engine.ErrInvalid, "%s: op %d", name, i)
		}
	}
	errs := engine.Joint(ctx, nil, engine.ConfirmOp(e.Lease, j.a), engine.ReleaseOp(j.other, j.b))
	assert.ErrorIs(t, errs[0], engine.ErrInvalid, "nil db")
	assert.Equal(t, before, j.rows(t), "nothing was written")
	assert.Empty(t, engine.Joint(ctx, e.DB))
}

// fencedJointEnd: RunFenced with two fences and a mark (the end of a
// tool call: session and request fences, the tool's success mark) commits
// the side effect only when every grant holds, and otherwise names the
// first grant gone, exactly as one by one, and leaves every row as it was.
func fencedJointEnd(t *testing.T, e Env) {
	ctx := ctxT(t)
	j := newJointEnv(t, e)
	effects := 0
	run := func(c engine.Grant[string]) error {
		effects++
		key := "effect-" + string(rune('0'+effects))
		return engine.RunFenced(ctx, e.DB, engine.FencedTx{
			Fences: []engine.Fence{e.Lease.Fence("first", j.a), j.other.Fence("second", j.b)},
			Mark:   func() []engine.JointOp { return []engine.JointOp{engine.TransitionOp(j.third, c, done)} },
		}, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, e.DB.Rebind("INSERT INTO "+ItemTable+" (item_key, generation) VALUES (?, 0)"), key)
			return err
		})
	}
	exists := func(key string) bool {
		var n int
		require.NoError(t, e.DB.GetContext(ctx, &n, e.DB.Rebind("SELECT COUNT(*) FROM "+ItemTable+" WHERE item_key = ?"), key))
		return n == 1
	}

	// The mark's grant is gone (c taken over): nothing commits.
	require.NoError(t, j.third.Release(ctx, e.DB, j.c))
	c2, err := j.third.Acquire(ctx, e.DB, "c", "thief", 30*time.Second)
	require.NoError(t, err)
	before := j.rows(t)
	err = run(j.c)
	var le *engine.LostError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "transition", le.Op)
	assert.Equal(t, "c", le.Key)
	assert.False(t, exists("effect-1"))
	assert.Equal(t, before, j.rows(t), "rolled back: the fences' renewals too")

	// All held: the side effect and the mark commit.
	require.NoError(t, run(c2))
	assert.True(t, exists("effect-2"))
	after := j.rows(t)
	assert.Equal(t, "success", after[2].State)
	assert.Nil(t, after[2].Token)
	assert.NotEqual(t, before[0].Expires, after[0].Expires, "the first fence renewed")
	assert.NotEqual(t, before[1].Expires, after[1].Expires, "the second fence renewed")

	// The second fence is gone: named, ErrLost, nothing committed.
	c3 := ensureAcquire(t, ctx, j.third, e.DB, "c3")
	thief := j.takeOverB(t)
	before = j.rows(t)
	err = run(c3)
	assert.ErrorIs(t, err, engine.ErrLost)
	assert.Contains(t, err.Error(), "lease: second fence")
	assert.NotContains(t, err.Error(), engine.Secret(j.b.Token))
	assert.NotContains(t, err.Error(), engine.Secret(thief.Token))
	assert.False(t, exists("effect-3"))
	assert.Equal(t, before, j.rows(t))
	assert.NotNil(t, j.ReadRowOf(t, "lease_third", "c3").Token, "the mark was not made")

	// Both fences gone: the first one in order is named.
	require.NoError(t, e.Lease.Release(ctx, e.DB, j.a))
	err = run(c3)
	assert.ErrorIs(t, err, engine.ErrLost)
	assert.Contains(t, err.Error(), "lease: first fence")
	assert.False(t, exists("effect-4"))
}
