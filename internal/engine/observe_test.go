package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/conformance"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
)

// opRecorder is a engine.Observer that keeps the operations.
type opRecorder struct {
	mu  sync.Mutex
	ops []engine.Op
}

func (r *opRecorder) Start(ctx context.Context, _ engine.Span) (context.Context, func(error, ...engine.Attr)) {
	return ctx, func(error, ...engine.Attr) {}
}

func (r *opRecorder) Op(_ context.Context, op engine.Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op)
}

func (r *opRecorder) Event(context.Context, string, ...engine.Attr) {}

func (r *opRecorder) summary() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, op := range r.ops {
		out = append(out, fmt.Sprintf("%s:%s:%d", op.Name, op.Verdict, op.Generation))
	}
	return out
}

func TestObserverSeesEveryOperationAndNoToken(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		rec := &opRecorder{}
		e := conformance.Setup(t, db, engine.Options{Observer: rec})
		e.Insert(t, "k")
		ctx := context.Background()
		g, err := e.Lease.Acquire(ctx, e.DB, "k", "a", time.Minute)
		require.NoError(t, err)
		_, err = e.Lease.Acquire(ctx, e.DB, "k", "b", time.Minute)
		require.ErrorIs(t, err, engine.ErrHeld)
		g, err = e.Lease.Renew(ctx, e.DB, g, time.Minute)
		require.NoError(t, err)
		require.NoError(t, e.Lease.Release(ctx, e.DB, g))
		_, err = e.Lease.Renew(ctx, e.DB, g, time.Minute)
		require.ErrorIs(t, err, engine.ErrLost)
		_, err = e.Lease.Acquire(ctx, e.DB, "", "a", time.Minute)
		require.ErrorIs(t, err, engine.ErrInvalid)

		assert.Equal(t, []string{
			"ensure:ok:0", // e.Insert
			"acquire:acquired:1",
			"inspect:ok:1", // the failed acquire reads who holds it
			"acquire:held:0",
			"renew:ok:1",
			"release:ok:1",
			"renew:lost:1",
			"acquire:invalid:0",
		}, rec.summary())
		for _, op := range rec.ops {
			assert.Equal(t, conformance.ItemTable, op.Table)
			assert.False(t, op.Start.IsZero())
			if op.Err != nil {
				assert.NotContains(t, op.Err.Error(), engine.Secret(g.Token))
			}
			assert.NotContains(t, fmt.Sprintf("%+v", op), engine.Secret(g.Token))
			assert.False(t, strings.Contains(fmt.Sprintf("%#v", op), engine.Secret(g.Token)))
		}
	})
}

// TestObserverSeesEachJointWrite: a Joint reports each of its writes to
// its Lease's Observer once, named and judged as the lone operation would
// be — also on MySQL when a grant is gone and the writes are sent again
// alone (the joint attempt is then not reported).
func TestObserverSeesEachJointWrite(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		rec := &opRecorder{}
		e := conformance.Setup(t, db, engine.Options{Observer: rec})
		other, third := e.ItemLike(t, "lease_other"), e.ItemLike(t, "lease_third")
		l2, err := engine.New[string](e.Dialect, engine.TableOf(other), engine.Options{Observer: rec})
		require.NoError(t, err)
		l3, err := engine.New[string](e.Dialect, engine.TableOf(third), engine.Options{Observer: rec})
		require.NoError(t, err)
		ctx := context.Background()
		hold := func(l *engine.Lease[string], key string) engine.Grant[string] {
			require.NoError(t, l.Ensure(ctx, e.DB, key, engine.CreateOptions{}))
			g, err := l.Acquire(ctx, e.DB, key, "h", time.Minute)
			require.NoError(t, err)
			return g
		}
		done := engine.ChangeOptions{From: []string{"processing"}, To: "success"}
		for _, lose := range []bool{false, true} {
			suffix := fmt.Sprint(lose)
			a, b, c := hold(e.Lease, "a"+suffix), hold(l2, "b"+suffix), hold(l3, "c"+suffix)
			if lose {
				require.NoError(t, l2.Release(ctx, e.DB, b))
			}
			rec.mu.Lock()
			rec.ops = nil
			rec.mu.Unlock()
			engine.Joint(ctx, e.DB, engine.ConfirmOp(e.Lease, a), engine.TransitionOp(l2, b, done), engine.ReleaseOp(l3, c))
			want := []string{"confirm:ok:1", "transition:ok:1", "release:ok:1"}
			if lose {
				want[1] = "transition:lost:1"
			}
			assert.Equal(t, want, rec.summary(), "lose %v", lose)
			rec.mu.Lock()
			for _, op := range rec.ops {
				assert.NotContains(t, fmt.Sprintf("%+v", op), engine.Secret(a.Token))
				assert.False(t, op.Start.IsZero())
			}
			rec.mu.Unlock()
		}
	})
}
