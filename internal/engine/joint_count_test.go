package engine_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/countdb"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// countedJoint is a counted database with a held row on each of three
// tables made like the conformance suite's item table.
type countedJoint struct {
	conformance.Env
	c            *countdb.Counter
	other, third *engine.Lease[string]
}

func newCountedJoint(t *testing.T, d engine.Dialect) countedJoint {
	c := &countdb.Counter{}
	e := conformance.Setup(t, openCounted(t, d, c), engine.Options{})
	return countedJoint{Env: e, c: c, other: e.ItemLike(t, "lease_other"), third: e.ItemLike(t, "lease_third")}
}

func (j countedJoint) hold(t *testing.T, l *engine.Lease[string], key string) engine.Grant[string] {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, l.Ensure(ctx, j.DB, key, engine.CreateOptions{}))
	g, err := l.Acquire(ctx, j.DB, key, "h", 30*time.Second)
	require.NoError(t, err)
	return g
}

// start resets the counter and records the statements from now on.
func (j countedJoint) start() {
	j.c.Reset()
	j.c.Record(true)
}

func (j countedJoint) logged(t *testing.T) {
	t.Helper()
	for i, q := range j.c.Log() {
		t.Logf("%d: %s", i+1, q)
	}
}

// TestJointStatements pins what engine.Joint sends for three writes on
// three tables (a confirmation, a transition, a release): one statement on
// PostgreSQL whatever each grant's fate; on MySQL one when every grant
// holds, and the joint statement plus each write alone when one does not;
// on SQLite, which has no statement that writes several tables, one per
// write.
func TestJointStatements(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			j := newCountedJoint(t, d)
			done := engine.ChangeOptions{From: []string{"processing"}, To: "success", Set: []engine.Assignment{engine.Set("note", "done")}}
			ops := func(a, b, c engine.Grant[string]) []engine.JointOp {
				return []engine.JointOp{engine.ConfirmOp(j.Lease, a), engine.TransitionOp(j.other, b, done), engine.ReleaseOp(j.third, c)}
			}
			// A first run prepares the lone statements on SQLite (once per pool).
			errs := engine.Joint(ctx, j.DB, ops(j.hold(t, j.Lease, "w"), j.hold(t, j.other, "w"), j.hold(t, j.third, "w"))...)
			require.Equal(t, []error{nil, nil, nil}, errs)

			a, b, c := j.hold(t, j.Lease, "a"), j.hold(t, j.other, "b"), j.hold(t, j.third, "c")
			j.start()
			errs = engine.Joint(ctx, j.DB, ops(a, b, c)...)
			require.Equal(t, []error{nil, nil, nil}, errs)
			j.logged(t)
			st := j.c.Stats()
			want := map[engine.Dialect]int64{engine.Postgres: 1, engine.MySQL: 1, engine.SQLite: 3}[d]
			assert.Equal(t, want, st.Statements, "all held")
			assert.Zero(t, st.Begins)
			assert.Zero(t, st.Prepares)

			// One grant gone (b released by its holder): b is lost, a and c made.
			a, b, c = j.hold(t, j.Lease, "a1"), j.hold(t, j.other, "b1"), j.hold(t, j.third, "c1")
			require.NoError(t, j.other.Release(ctx, j.DB, b))
			j.start()
			errs = engine.Joint(ctx, j.DB, ops(a, b, c)...)
			assert.NoError(t, errs[0])
			assert.ErrorIs(t, errs[1], engine.ErrLost)
			assert.NoError(t, errs[2])
			j.logged(t)
			want = map[engine.Dialect]int64{engine.Postgres: 1, engine.MySQL: 4, engine.SQLite: 3}[d]
			assert.Equal(t, want, j.c.Stats().Statements, "one lost")
		})
	}
}

// TestFencedEndStatements pins the end of a fenced transaction with two
// fences (session, request) and one mark (the tool's success): BEGIN, the
// side effect, one statement for the fences and the mark on PostgreSQL,
// three one by one on MySQL and SQLite (see RunFenced for why not MySQL's
// multi-table UPDATE), COMMIT. When the request fence is gone, one by one
// stops at it: the session fence, then the request fence, which is lost.
func TestFencedEndStatements(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			j := newCountedJoint(t, d)
			run := func(s, r, tool engine.Grant[string]) error {
				return engine.RunFenced(ctx, j.DB, engine.FencedTx{
					Fences: []engine.Fence{j.Lease.Fence("session", s), j.other.Fence("request", r)},
					Mark: func() []engine.JointOp {
						return []engine.JointOp{engine.TransitionOp(j.third, tool, engine.ChangeOptions{From: []string{"processing"}, To: "success",
							Set: []engine.Assignment{engine.Set("note", "result")}})}
					},
				}, func(tx *sql.Tx) error {
					j.c.Pause() // the side effect's own statement is not counted
					defer j.c.Resume()
					_, err := tx.ExecContext(ctx, j.DB.Rebind("INSERT INTO "+conformance.ItemTable+" (item_key, generation) VALUES (?, 0)"), "effect-"+tool.Key)
					return err
				})
			}
			require.NoError(t, run(j.hold(t, j.Lease, "s0"), j.hold(t, j.other, "r0"), j.hold(t, j.third, "t0")))

			s, r, tool := j.hold(t, j.Lease, "s"), j.hold(t, j.other, "r"), j.hold(t, j.third, "t")
			j.start()
			require.NoError(t, run(s, r, tool))
			j.logged(t)
			st := j.c.Stats()
			want := map[engine.Dialect]int64{engine.Postgres: 1, engine.MySQL: 3, engine.SQLite: 3}[d]
			assert.Equal(t, want, st.Statements, "fences and mark")
			assert.Equal(t, int64(1), st.Begins)
			assert.Equal(t, int64(1), st.Commits)
			assert.Zero(t, st.Rollbacks)

			s, r, tool = j.hold(t, j.Lease, "s1"), j.hold(t, j.other, "r1"), j.hold(t, j.third, "t1")
			require.NoError(t, j.other.Release(ctx, j.DB, r))
			j.start()
			err := run(s, r, tool)
			assert.ErrorIs(t, err, engine.ErrLost)
			assert.ErrorContains(t, err, "lease: request fence")
			j.logged(t)
			st = j.c.Stats()
			want = map[engine.Dialect]int64{engine.Postgres: 1, engine.MySQL: 2, engine.SQLite: 2}[d]
			assert.Equal(t, want, st.Statements, "the request fence lost")
			assert.Equal(t, int64(1), st.Rollbacks)
		})
	}
}
