package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// TestAcquireCreateStatements pins what engine.AcquireCreate sends: one
// statement and no transaction on PostgreSQL; in a transaction on MySQL
// and SQLite, the acquire and the insert (four round trips with BEGIN and
// COMMIT). A miss costs one read more, as for AcquireWith.
func TestAcquireCreateStatements(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			j := newCountedJoint(t, d)
			db := engine.DB(j.DB)
			run := func(key string) error {
				if d != engine.Postgres {
					tx, err := j.DB.BeginTx(ctx, nil)
					require.NoError(t, err)
					db = tx
					defer func() { require.NoError(t, tx.Commit()) }()
				}
				_, _, err := engine.AcquireCreate(ctx, db, engine.NewAcquireOp(j.Lease, "s", key, 30*time.Second, engine.AcquireOptions{}),
					engine.NewCreateOp(j.other, key, "run", 30*time.Second, engine.CreateOptions{State: "processing", Set: []engine.Assignment{engine.Set("note", "n")}}))
				return err
			}
			require.NoError(t, j.Lease.Ensure(ctx, j.DB, "s", engine.CreateOptions{}))
			require.NoError(t, run("warm-up")) // the first use's check
			free(t, j.Env, "s")

			j.start()
			require.NoError(t, run("r1"))
			j.logged(t)
			s := j.c.Stats()
			if d == engine.Postgres {
				assert.Equal(t, int64(1), s.Statements)
				assert.Zero(t, s.Begins+s.Commits)
				q := j.c.Log()[0]
				assert.True(t, strings.HasPrefix(q, "WITH rowlease_acquired AS (UPDATE "), q)
				assert.Contains(t, q, "INSERT INTO")
			} else {
				assert.Equal(t, int64(2), s.Statements)
				assert.Equal(t, int64(1), s.Begins)
				assert.Equal(t, int64(1), s.Commits)
			}

			j.start()
			require.ErrorIs(t, run("r2"), engine.ErrHeld)
			assert.Equal(t, int64(2), j.c.Stats().Statements, "a miss: the statement and one read")
		})
	}
}

// TestAcquireCreateUnlessStatements pins what engine.AcquireCreateUnless
// sends: on PostgreSQL one statement and no transaction, whether it finds
// the row or creates it; on MySQL and SQLite, in a transaction, the read
// alone when it finds the row, and the read, the acquire and the insert
// when it does not.
func TestAcquireCreateUnlessStatements(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			j := newCountedJoint(t, d)
			run := func(key string) (bool, error) {
				db := engine.DB(j.DB)
				if d != engine.Postgres {
					tx, err := j.DB.BeginTx(ctx, nil)
					require.NoError(t, err)
					db = tx
					defer func() { require.NoError(t, tx.Commit()) }()
				}
				var state string
				_, _, found, err := engine.AcquireCreateUnless(ctx, db, engine.NewAcquireOp(j.Lease, "s", key, 30*time.Second, engine.AcquireOptions{}),
					engine.NewCreateOp(j.other, key, "run", 30*time.Second, engine.CreateOptions{State: "processing"}),
					engine.Unless{Match: []engine.Assignment{engine.Set("item_key", key)}, Columns: []string{"state"}}, &state)
				return found, err
			}
			require.NoError(t, j.Lease.Ensure(ctx, j.DB, "s", engine.CreateOptions{}))
			_, err := run("warm-up") // the first use's check
			require.NoError(t, err)
			free(t, j.Env, "s")

			j.start()
			found, err := run("r1")
			require.NoError(t, err)
			require.False(t, found)
			j.logged(t)
			s := j.c.Stats()
			if d == engine.Postgres {
				assert.Equal(t, int64(1), s.Statements)
				assert.Zero(t, s.Begins+s.Commits)
				q := j.c.Log()[0]
				assert.True(t, strings.HasPrefix(q, "WITH rowlease_existing AS (SELECT "), q)
			} else {
				assert.Equal(t, int64(3), s.Statements)
			}

			free(t, j.Env, "s")
			j.start()
			found, err = run("r1")
			require.NoError(t, err)
			require.True(t, found)
			assert.Equal(t, int64(1), j.c.Stats().Statements, "a row found: one statement")
		})
	}
}

// free frees a row by hand, for the next case of a test.
func free(t *testing.T, e conformance.Env, key string) {
	t.Helper()
	_, err := e.DB.Exec(e.DB.Rebind("UPDATE "+conformance.ItemTable+" SET token = NULL, holder = NULL, expires_at = NULL WHERE item_key = ?"), key)
	require.NoError(t, err)
}

var errLostReply = errors.New("the reply was lost")

// TestAcquireCreateUnknownOutcome: the statement commits on PostgreSQL and
// its reply is lost. The grants returned with the driver's error hold what
// was sent, so the caller can find out and give back what took effect, as
// the doc says: Inspect the acquired row (its holder is the one sent) for
// the generation, Release it, Delete the created row.
func TestAcquireCreateUnknownOutcome(t *testing.T) {
	ctx := context.Background()
	j := newCountedJoint(t, engine.Postgres)
	require.NoError(t, j.Lease.Ensure(ctx, j.DB, "s", engine.CreateOptions{}))
	var failed atomic.Bool
	j.c.FailAfter(func(q string) error {
		if strings.HasPrefix(q, "WITH rowlease_acquired") && failed.CompareAndSwap(false, true) {
			return errLostReply
		}
		return nil
	})
	ga, gc, err := engine.AcquireCreate(ctx, j.DB, engine.NewAcquireOp(j.Lease, "s", "r1", 30*time.Second, engine.AcquireOptions{}),
		engine.NewCreateOp(j.other, "r1", "run", 30*time.Second, engine.CreateOptions{}))
	j.c.FailAfter(nil)
	require.ErrorIs(t, err, errLostReply)
	require.True(t, failed.Load())
	assert.False(t, ga.Trusted(time.Now()), "a grant returned with an error is never trusted")
	assert.False(t, gc.Trusted(time.Now()))
	assert.Zero(t, ga.Generation, "unknown")
	assert.Equal(t, int64(1), gc.Generation)

	// It took effect: both rows are held.
	st, err := j.Lease.Inspect(ctx, j.DB, "s")
	require.NoError(t, err)
	require.True(t, st.Held)
	require.Equal(t, "r1", st.Holder)
	// The give-back.
	ga.Generation = st.Generation
	require.NoError(t, j.Lease.Release(ctx, j.DB, ga))
	require.NoError(t, j.other.Delete(ctx, j.DB, gc))
	st, err = j.Lease.Inspect(ctx, j.DB, "s")
	require.NoError(t, err)
	assert.False(t, st.Held)
	_, err = j.other.Inspect(ctx, j.DB, "r1")
	assert.ErrorIs(t, err, engine.ErrNotFound)
}

// TestObserverSeesAcquireCreate: AcquireCreate reports its acquire and
// its create as the lone operations would be reported: acquire and create
// when both are made; the read and the acquire's conflict, and no create,
// when the acquire does not match; both with the error of a duplicate.
func TestObserverSeesAcquireCreate(t *testing.T) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			rec := &opRecorder{}
			e := conformance.Setup(t, testdb.Open(t, d), engine.Options{Observer: rec})
			other := e.ItemLike(t, "lease_other")
			l2, err := engine.New[string](e.Dialect, engine.TableOf(other), engine.Options{Observer: rec})
			require.NoError(t, err)
			ctx := context.Background()
			e.Insert(t, "s")
			rec.mu.Lock()
			rec.ops = nil
			rec.mu.Unlock()
			call := func(holder, key string) {
				db := engine.DB(e.DB)
				if d != engine.Postgres {
					tx, err := e.DB.BeginTx(ctx, nil)
					require.NoError(t, err)
					defer func() { require.NoError(t, tx.Commit()) }()
					db = tx
				}
				_, _, _ = engine.AcquireCreate(ctx, db, engine.NewAcquireOp(e.Lease, "s", holder, time.Minute, engine.AcquireOptions{}),
					engine.NewCreateOp(l2, key, "run", time.Minute, engine.CreateOptions{}))
			}
			call("a", "r1")
			call("b", "r2")
			assert.Equal(t, []string{"acquire:acquired:1", "create:acquired:1", "inspect:ok:1", "acquire:held:0"}, rec.summary())
			if d == engine.Postgres {
				rec.mu.Lock()
				rec.ops = nil
				rec.mu.Unlock()
				free(t, e, "s")
				call("c", "r1") // a duplicate: both undone
				assert.Equal(t, []string{"acquire:exists:0", "create:exists:0"}, rec.summary())
			}
			for _, op := range rec.ops {
				assert.False(t, op.Start.IsZero())
				if op.Err != nil {
					assert.NotContains(t, fmt.Sprintf("%+v", op.Err), "token")
				}
			}
		})
	}
}
