package toolexec_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/toolexec"
)

// receiver is a remote side that honours idempotency keys: it performs an
// effect once per key and answers a repeated key with the first outcome.
type receiver struct {
	mu      sync.Mutex
	done    map[string]json.RawMessage
	keys    []string // every key it was called with, in order
	effects atomic.Int64
}

func newReceiver() *receiver { return &receiver{done: map[string]json.RawMessage{}} }

func (r *receiver) call(key string) json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, key)
	if out, ok := r.done[key]; ok {
		return out
	}
	r.effects.Add(1)
	out := json.RawMessage(`{"paid":true,"key":"` + key + `"}`)
	r.done[key] = out
	return out
}

func (r *receiver) performed(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.done[key]
	return ok
}

func (r *receiver) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...)
}

func (f *flow) pay(args string) toolexec.Call {
	c := f.call(args)
	c.Tool = "pay"
	return c
}

func TestExternalRecordsIntentActsAndRecordsResult(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		f := e.newFlow(t, "s1", ttl)
		rcv := newReceiver()
		var seen toolexec.External
		res, err := e.store.ExecuteExternal(ctx, db, f.pay(`{"a":35}`), e.opts(f, ttl), toolexec.ExternalOptions{},
			func(ctx context.Context, x toolexec.External) (json.RawMessage, error) {
				seen = x
				// The intent is committed before the act: another
				// connection sees the call started, held, with its key.
				row := e.toolRow(t, x.ExecutionID)
				assert.Equal(t, schema.StoredStarted, row.State)
				assert.True(t, row.Held)
				return rcv.call(x.EffectKey), nil
			})
		require.NoError(t, err)
		assert.False(t, seen.Again)
		assert.Equal(t, res.ExecutionID, seen.EffectKey, "the effect key is the execution id")
		assert.Len(t, seen.EffectKey, 36)
		assert.Equal(t, int64(1), seen.Generation)
		assert.Equal(t, map[string]int64{"session": f.sess.Generation, "request": f.req.Generation}, seen.Fences)
		assert.JSONEq(t, `{"a":35}`, string(seen.Canonical))
		row := e.toolRow(t, res.ExecutionID)
		assert.Equal(t, schema.StoredSucceeded, row.State)
		assert.False(t, row.Held)
		assert.JSONEq(t, string(rcv.call(seen.EffectKey)), row.result)

		// The same call again: the stored result, no act.
		again, err := e.store.ExecuteExternal(ctx, db, f.pay(`{"a":3.5e1}`), e.opts(f, ttl), toolexec.ExternalOptions{},
			func(context.Context, toolexec.External) (json.RawMessage, error) {
				t.Error("a recorded call acted again")
				return nil, nil
			})
		require.NoError(t, err)
		assert.True(t, again.Reused)
		assert.Equal(t, int64(1), rcv.effects.Load())
	})
}

func TestExternalUnknownOutcome(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		f := e.newFlow(t, "s1", ttl)
		rcv := newReceiver()
		timeout := errors.New("read tcp: i/o timeout")
		// The remote side performs the effect, but the answer is lost.
		_, err := e.store.ExecuteExternal(ctx, db, f.pay(`{"a":35}`), e.opts(f, ttl), toolexec.ExternalOptions{},
			func(ctx context.Context, x toolexec.External) (json.RawMessage, error) {
				rcv.call(x.EffectKey)
				return nil, timeout
			})
		var ue *toolexec.UnknownOutcomeError
		require.ErrorAs(t, err, &ue)
		assert.ErrorAs(t, err, new(*toolexec.UnknownOutcomeError))
		assert.ErrorIs(t, err, timeout)
		assert.NotErrorAs(t, err, new(*toolexec.FailedError))
		key := ue.EffectKey
		assert.Equal(t, ue.ExecutionID, key)
		assert.True(t, rcv.performed(key))
		row := e.toolRow(t, key)
		assert.Equal(t, schema.StoredStarted, row.State, "left started")
		assert.False(t, row.Held, "and free")

		never := func(context.Context, toolexec.External) (json.RawMessage, error) {
			t.Error("acted on an unknown outcome without being told to")
			return nil, nil
		}
		// Without a way to reconcile, it stays unknown: never a new act.
		_, err = e.store.ExecuteExternal(ctx, db, f.pay(`{"a":35}`), e.opts(f, ttl), toolexec.ExternalOptions{}, never)
		require.ErrorAs(t, err, &ue)
		assert.Equal(t, key, ue.EffectKey)
		// An in-transaction run of the same call refuses it too.
		_, err = e.store.Execute(ctx, db, f.pay(`{"a":35}`), e.opts(f, ttl), e.ledger)
		assert.ErrorAs(t, err, new(*toolexec.UnknownOutcomeError))
		assert.Zero(t, e.ledgerRows(t))

		// A reconciler that cannot tell keeps it unknown.
		_, err = e.store.ExecuteExternal(ctx, db, f.pay(`{"a":35}`), e.opts(f, ttl), toolexec.ExternalOptions{
			Reconcile: func(context.Context, toolexec.External) (json.RawMessage, error) {
				return nil, errors.New("remote down")
			},
		}, never)
		assert.ErrorAs(t, err, new(*toolexec.UnknownOutcomeError))

		// A reconciler that finds the effect records its result.
		var asked toolexec.External
		res, err := e.store.ExecuteExternal(ctx, db, f.pay(`{"a":35}`), e.opts(f, ttl), toolexec.ExternalOptions{
			Reconcile: func(_ context.Context, x toolexec.External) (json.RawMessage, error) {
				asked = x
				rcv.mu.Lock()
				defer rcv.mu.Unlock()
				if out, ok := rcv.done[x.EffectKey]; ok {
					return out, nil
				}
				return nil, toolexec.NotPerformed(errors.New("no such payment"))
			},
		}, never)
		require.NoError(t, err)
		assert.True(t, asked.Again)
		assert.Equal(t, key, asked.EffectKey)
		assert.Equal(t, key, res.ExecutionID)
		assert.Equal(t, int64(1), rcv.effects.Load())
		assert.Equal(t, schema.StoredSucceeded, e.toolRow(t, key).State)
	})
}

func TestExternalRepeatAndReconcileNotPerformed(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		for _, tc := range []struct {
			name string
			opts func(rcv *receiver) toolexec.ExternalOptions
		}{
			{"repeat", func(*receiver) toolexec.ExternalOptions { return toolexec.ExternalOptions{Repeat: true} }},
			{"reconcile not performed", func(rcv *receiver) toolexec.ExternalOptions {
				return toolexec.ExternalOptions{Reconcile: func(_ context.Context, x toolexec.External) (json.RawMessage, error) {
					if rcv.performed(x.EffectKey) {
						return json.RawMessage(`"found"`), nil
					}
					return nil, toolexec.NotPerformed(nil)
				}}
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := e.newFlow(t, "s-"+tc.name, ttl)
				rcv := newReceiver()
				// The first act dies before reaching the remote side.
				_, err := e.store.ExecuteExternal(ctx, db, f.pay(`{"a":1}`), e.opts(f, ttl), tc.opts(rcv),
					func(context.Context, toolexec.External) (json.RawMessage, error) {
						return nil, errors.New("connection refused")
					})
				var ue *toolexec.UnknownOutcomeError
				require.ErrorAs(t, err, &ue)
				var again toolexec.External
				res, err := e.store.ExecuteExternal(ctx, db, f.pay(`{"a":1}`), e.opts(f, ttl), tc.opts(rcv),
					func(_ context.Context, x toolexec.External) (json.RawMessage, error) {
						again = x
						return rcv.call(x.EffectKey), nil
					})
				require.NoError(t, err)
				assert.True(t, again.Again)
				assert.Equal(t, ue.EffectKey, again.EffectKey, "acted again under the same key")
				assert.Equal(t, []string{ue.EffectKey}, rcv.calls())
				assert.Equal(t, int64(1), rcv.effects.Load())
				assert.Equal(t, schema.StoredSucceeded, e.toolRow(t, res.ExecutionID).State)
			})
		}
	})
}

func TestExternalNotPerformedIsAFailureRetriedWithTheSameKey(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		f := e.newFlow(t, "s1", ttl)
		var keys []string
		declined := errors.New("card declined")
		_, err := e.store.ExecuteExternal(ctx, db, f.pay(`{"a":1}`), e.opts(f, ttl), toolexec.ExternalOptions{},
			func(_ context.Context, x toolexec.External) (json.RawMessage, error) {
				keys = append(keys, x.EffectKey)
				return nil, toolexec.NotPerformed(declined)
			})
		var fe *toolexec.FailedError
		require.ErrorAs(t, err, &fe)
		assert.ErrorIs(t, err, declined)
		assert.NotErrorAs(t, err, new(*toolexec.UnknownOutcomeError))
		row := e.toolRow(t, keys[0])
		assert.Equal(t, schema.StoredFailed, row.State)
		assert.Contains(t, row.errText, "card declined")
		assert.False(t, row.Held)

		res, err := e.store.ExecuteExternal(ctx, db, f.pay(`{"a":1}`), e.opts(f, ttl), toolexec.ExternalOptions{},
			func(_ context.Context, x toolexec.External) (json.RawMessage, error) {
				assert.False(t, x.Again, "a recorded failure is not an unknown outcome")
				keys = append(keys, x.EffectKey)
				return json.RawMessage(`{"ok":1}`), nil
			})
		require.NoError(t, err)
		require.Len(t, keys, 2)
		assert.Equal(t, keys[0], keys[1], "the effect key is stable across retries")
		assert.Equal(t, keys[0], res.ExecutionID)
	})
}

func TestExternalLostFenceNeverActs(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		f := e.newFlow(t, "s1", ttl)
		require.NoError(t, e.sessions.Release(ctx, db, f.sess))
		_, err := e.store.ExecuteExternal(ctx, db, f.pay(`{"a":1}`), e.opts(f, ttl), toolexec.ExternalOptions{},
			func(context.Context, toolexec.External) (json.RawMessage, error) {
				t.Error("acted for a flow that lost its session")
				return nil, nil
			})
		assert.ErrorIs(t, err, lease.ErrLost)
		assert.Contains(t, err.Error(), "session fence")
		var id string
		require.NoError(t, db.GetContext(ctx, &id, e.d.Rebind("SELECT id FROM "+schema.ToolExecutionTable+" WHERE request_id = ?"), f.requestID))
		row := e.toolRow(t, id)
		assert.Equal(t, schema.StoredProcessing, row.State, "no intent recorded")
		assert.False(t, row.Held)
	})
}

// A flow dies after announcing its effect (its tool lease expires with
// nobody renewing it); a second flow takes the call over and reconciles
// it under the same key, and the first, waking up, cannot record anything.
func TestExternalTakeoverAfterACrashReconcilesUnderTheSameKey(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnv(t, db)
		ctx := bg(t)
		const short = 200 * time.Millisecond
		f := e.newFlow(t, "s1", ttl)
		rcv := newReceiver()
		acting := make(chan toolexec.External)
		wake := make(chan struct{})
		first := make(chan error, 1)
		o := e.opts(f, ttl)
		o.TTL = short // the tool lease, never renewed here
		go func() {
			_, err := e.store.ExecuteExternal(ctx, db, f.pay(`{"a":9}`), o, toolexec.ExternalOptions{Repeat: true},
				func(_ context.Context, x toolexec.External) (json.RawMessage, error) {
					acting <- x
					<-wake
					return rcv.call(x.EffectKey), nil
				})
			first <- err
		}()
		x1 := <-acting
		waitFor(t, "the dead flow's tool lease expires", func() bool {
			st, err := e.store.Lease().Inspect(ctx, db, x1.ExecutionID)
			require.NoError(t, err)
			return !st.Held
		})
		res, err := e.store.ExecuteExternal(ctx, db, f.pay(`{"a":9}`), e.opts(f, ttl), toolexec.ExternalOptions{Repeat: true},
			func(_ context.Context, x toolexec.External) (json.RawMessage, error) {
				assert.True(t, x.Again)
				assert.Equal(t, x1.EffectKey, x.EffectKey)
				assert.Equal(t, x1.Generation+1, x.Generation)
				return rcv.call(x.EffectKey), nil
			})
		require.NoError(t, err)
		assert.Equal(t, x1.ExecutionID, res.ExecutionID)
		close(wake)
		err = <-first
		assert.ErrorIs(t, err, lease.ErrLost, "the woken flow cannot record its result")
		assert.Equal(t, int64(1), rcv.effects.Load(), "one effect for two acts under one key")
		assert.Equal(t, []string{x1.EffectKey, x1.EffectKey}, rcv.calls())
		assert.Equal(t, schema.StoredSucceeded, e.toolRow(t, x1.ExecutionID).State)
	})
}
